/*
 * _crc32.h - fast CRC-32 (zlib / Ethernet / gzip polynomial) for the RoCEv2 ICRC,
 * and a fast reflected CRC-16 for InfiniBand's VCRC and LPCRC.
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

/*
 * Reflected CRC-16 (InfiniBand's VCRC and LPCRC, IBA 7.8.2).  The polynomial is
 * the caller's: roce_crc16r_setup() builds the tables and folding constants of
 * the bit-reflected polynomial `poly` (0xD008 for IBA's 0x100B) and must run
 * once before roce_crc16r() (roce.families.ib.crc hands it the polynomial at
 * import).  roce_crc16r() works on the raw register: `reg` in (the initial
 * value to start), the register after buf[0..len) out, with no final xor or
 * byte order applied.  Kernels, chosen at run time:
 *   "vpclmulqdq-avx512"  x86-64, VPCLMULQDQ + AVX-512, folds 4 x 512 bits per step
 *   "pclmulqdq-sse4"     x86-64, PCLMULQDQ + SSE4.1, folds 4 x 128 bits per step
 *   "slice-by-8"         portable table-driven kernel
 */
void roce_crc16r_setup(uint16_t poly);
uint16_t roce_crc16r(uint16_t reg, const unsigned char *buf, size_t len);

/* Name of the CRC-16 kernel in use; force one by name (testing aid, as for
 * the CRC-32: unknown or unsupported names are ignored, NULL is automatic). */
const char *roce_crc16r_impl(void);
void roce_crc16r_force(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* ROCE_CRC32_H */
