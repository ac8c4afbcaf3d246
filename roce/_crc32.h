/*
 * _crc32.h - fast CRC-32 (zlib / Ethernet / gzip polynomial) for the RoCEv2 ICRC.
 *
 * CRC parameters: reflected polynomial 0xEDB88320, initial value ~0, final xor ~0.
 * roce_crc32() has exactly the semantics of zlib's crc32(): start with crc = 0,
 * chain by passing the previous result; the result equals Python's
 * zlib.crc32(data, crc).
 *
 * The kernel is chosen at run time (first call) from what the CPU supports:
 *   "vpclmulqdq-avx512"  x86-64, VPCLMULQDQ + AVX-512, folds 4 x 512 bits per step
 *   "pclmulqdq-sse4"     x86-64, PCLMULQDQ + SSE4.1, folds 4 x 128 bits per step
 *   "slice-by-8"         portable table-driven fallback (any architecture)
 * Compile with -DROCE_CRC32_NO_SIMD to build only the portable kernel.
 * All functions are thread-safe.
 */
#ifndef ROCE_CRC32_H
#define ROCE_CRC32_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* zlib-compatible CRC-32 of buf[0..len) continuing from crc (0 to start). */
uint32_t roce_crc32(uint32_t crc, const unsigned char *buf, size_t len);

/* Name of the kernel currently in use (static string, never NULL). */
const char *roce_crc32_impl(void);

/* Testing aid: force the kernel called `name` (see list above).  Unknown
 * names and kernels the CPU cannot run are ignored.  NULL restores the
 * automatic choice. */
void roce_crc32_force(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* ROCE_CRC32_H */
