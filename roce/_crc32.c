/*
 * _crc32.c - fast CRC-32 (reflected polynomial 0xEDB88320) for the RoCEv2 ICRC.
 * See _crc32.h for the interface.
 *
 * Kernels
 *   slice-by-8         portable, 8 lookup tables of 256 entries built once at
 *                      first use (guarded by a once-pattern).
 *   pclmulqdq-sse4     carry-less-multiply folding of 4 independent 128-bit
 *                      lanes (64 bytes per step), then the lanes are folded
 *                      into one, the last < 16 bytes are merged with a
 *                      shuffle, and the final 128 bits are Barrett-reduced.
 *   vpclmulqdq-avx512  the same folding on 4 x 512-bit registers (256 bytes
 *                      per step), reduced to 128 bits and finished as above.
 * The SIMD kernels are compiled with per-function target attributes, so the
 * file needs no global -m flags; the choice is made at run time with
 * __builtin_cpu_supports().
 *
 * Internally every kernel works on the raw CRC register (i.e. ~crc).
 */
#include "_crc32.h"

#include <string.h>

#if !defined(ROCE_CRC32_NO_SIMD) && defined(__x86_64__) && defined(__GNUC__)
#  define ROCE_CRC32_X86 1
#  include <immintrin.h>
   /* VPCLMULQDQ target attribute / cpu-supports name: GCC >= 8, clang >= 9. */
#  if (defined(__clang__) && __clang_major__ >= 9) || \
      (!defined(__clang__) && __GNUC__ >= 8)
#    define ROCE_CRC32_AVX512 1
#  endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define ROCE_LOAD_ACQ(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#  define ROCE_STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#  define ROCE_CAS(p, e, d) \
     __atomic_compare_exchange_n((p), (e), (d), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#else
   /* No atomics available: plain accesses.  The table contents written by
    * racing initialisers are identical, so this is benign in practice. */
#  define ROCE_LOAD_ACQ(p)     (*(volatile int *)(p))
#  define ROCE_STORE_REL(p, v) (*(volatile int *)(p) = (v))
static int roce_cas_plain(int *p, int *e, int d)
{
    if (*p == *e) { *p = d; return 1; }
    *e = *p;
    return 0;
}
#  define ROCE_CAS(p, e, d) roce_cas_plain((p), (e), (d))
#endif

#define ROCE_POLY 0xEDB88320u

/* ------------------------------------------------------------------------ */
/* Portable slice-by-8                                                       */
/* ------------------------------------------------------------------------ */

/* tab[k][b] = raw CRC register after feeding byte b followed by k zero bytes. */
static uint32_t crc_tab[8][256];
static int crc_tab_state; /* 0 = not built, 1 = building, 2 = ready */

static void crc_tab_build(void)
{
    unsigned i, k;
    for (i = 0; i < 256; i++) {
        uint32_t c = i;
        for (k = 0; k < 8; k++)
            c = (c >> 1) ^ (ROCE_POLY & (0u - (c & 1u)));
        crc_tab[0][i] = c;
    }
    for (i = 0; i < 256; i++) {
        uint32_t c = crc_tab[0][i];
        for (k = 1; k < 8; k++) {
            c = (c >> 8) ^ crc_tab[0][c & 0xffu];
            crc_tab[k][i] = c;
        }
    }
}

static void crc_tab_once(void)
{
    int expect = 0;
    if (ROCE_LOAD_ACQ(&crc_tab_state) == 2)
        return;
    if (ROCE_CAS(&crc_tab_state, &expect, 1)) {
        crc_tab_build();
        ROCE_STORE_REL(&crc_tab_state, 2);
    } else {
        while (ROCE_LOAD_ACQ(&crc_tab_state) != 2)
            ; /* another thread is building the tables (a few microseconds) */
    }
}

static inline uint32_t load_le32(const unsigned char *p)
{
    /* byte-wise assembly: one plain load on little-endian targets at -O2 */
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) |
           ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Raw register in, raw register out.  Tables must be built. */
static uint32_t crc_sb8(uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint32_t a = load_le32(p) ^ c;
        uint32_t b = load_le32(p + 4);
        c = crc_tab[7][a & 0xffu] ^ crc_tab[6][(a >> 8) & 0xffu] ^
            crc_tab[5][(a >> 16) & 0xffu] ^ crc_tab[4][a >> 24] ^
            crc_tab[3][b & 0xffu] ^ crc_tab[2][(b >> 8) & 0xffu] ^
            crc_tab[1][(b >> 16) & 0xffu] ^ crc_tab[0][b >> 24];
        p += 8;
        n -= 8;
    }
    if (n >= 4) {
        uint32_t a = load_le32(p) ^ c;
        c = crc_tab[3][a & 0xffu] ^ crc_tab[2][(a >> 8) & 0xffu] ^
            crc_tab[1][(a >> 16) & 0xffu] ^ crc_tab[0][a >> 24];
        p += 4;
        n -= 4;
    }
    while (n--)
        c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xffu];
    return c;
}

#ifdef ROCE_CRC32_X86
/* ------------------------------------------------------------------------ */
/* Folding constants                                                         */
/* ------------------------------------------------------------------------ */
/*
 * Bit convention (reflected CRC): in a 128-bit block loaded little-endian,
 * bit i is the coefficient of x^(127-i) relative to the end of the block.
 * For 64-bit operands a (bit i <-> x^(A-i)) and b (bit j <-> x^(B-j)),
 * PCLMULQDQ gives bit k <-> x^(A+B-k).
 *
 * Folding a block forward over F bits (onto the block F bits later):
 *     new = clmul(lo64, K_lo) ^ clmul(hi64, K_hi) ^ next_block
 * with K_lo = x^(F+32) mod P and K_hi = x^(F-32) mod P, each stored as a
 * 33-bit value bit-reflected over 32 bits and shifted left by one
 * (bit j <-> x^(32-j)).  Final reduction of the last 128-bit block R to the
 * CRC (R * x^32 mod P) splits R into 32-bit pieces d0..d3 (d0 = lowest):
 *     T = clmul(d0, x^128) ^ clmul(d1, x^96) ^ clmul(d2, x^64) ^ d3
 * (T is 64 bits, congruent to R*x^32), then Barrett reduction with
 * MU = floor(x^64 / P) reflected over 33 bits and P reflected over 33 bits:
 *     q = low32(clmul(low32(T), MU));  crc = bits 32..63 of T ^ clmul(q, P).
 *
 * The numbers below were computed with a short Python script (polynomial
 * arithmetic over GF(2) on P = 0x104C11DB7: x^n mod P by square-and-multiply,
 * floor(x^64/P) by long division, then bit reversal), and the whole algorithm
 * was checked bit-for-bit against zlib.crc32 in that script before use.
 */
#define K_X2080 0x011542778aULL /* F = 2048 (4 x 512-bit lanes), low  */
#define K_X2016 0x01322d1430ULL /*                                 high */
#define K_X1568 0x01821d8bc0ULL /* F = 1536 */
#define K_X1504 0x012e958ac4ULL
#define K_X1056 0x01e88ef372ULL /* F = 1024 */
#define K_X992  0x014a7fe880ULL
#define K_X544  0x0154442bd4ULL /* F = 512  (4 x 128-bit lanes, 1 x 512) */
#define K_X480  0x01c6e41596ULL
#define K_X416  0x003db1ecdcULL /* F = 384 */
#define K_X352  0x0174359406ULL
#define K_X288  0x00f1da05aaULL /* F = 256 */
#define K_X224  0x015a546366ULL
#define K_X160  0x01751997d0ULL /* F = 128 */
#define K_X96   0x00ccaa009eULL
#define K_X128  0x0140d44a2eULL /* final reduction */
#define K_X64   0x0163cd6124ULL
#define K_MU    0x01f7011641ULL /* floor(x^64 / P), reflected (33 bits) */
#define K_POLY  0x01db710641ULL /* P, reflected (33 bits) */

#define ROCE_T128 __attribute__((target("pclmul,sse4.1")))

/* Below this length the SIMD kernels use the tables; from ROCE_CLMUL_MIN to
 * 63 bytes they fold a single 128-bit lane, from 64 bytes on, 4 lanes. */
#ifndef ROCE_CLMUL_MIN
#define ROCE_CLMUL_MIN 32 /* measured crossover on AMD Zen 4 */
#endif
#if ROCE_CLMUL_MIN < 16
#error "ROCE_CLMUL_MIN must be at least 16"
#endif

/* Shuffle-control source for the variable byte shifts of the tail step:
 * entries 16..31 are 0..15, everything else 0x80 (pshufb writes zero). */
static const unsigned char shuf_tab[48] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
};

static inline ROCE_T128 __attribute__((always_inline)) __m128i
clmul_fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                         _mm_clmulepi64_si128(x, k, 0x11));
}

static inline ROCE_T128 __attribute__((always_inline)) __m128i
fold128(__m128i x, __m128i k, __m128i d)
{
    return _mm_xor_si128(clmul_fold(x, k), d);
}

/*
 * Finish: x is the folded state of every whole 16-byte block of p[0..n)
 * (n >= 16); the r = n % 16 bytes after them are merged here.  Returns the raw
 * CRC register.
 */
static inline ROCE_T128 __attribute__((always_inline)) uint32_t
finish128(__m128i x, const unsigned char *p, size_t n)
{
    const size_t r = n & 15;
    __m128i t, q;
    p += n - r;
    if (r) {
        /* The stream is x (16 bytes) || p[0..r).  Its last 16 bytes are
         * b = x[r..16) || p[0..r), preceded by a = x[0..r) which is folded
         * forward over 128 bits onto b. */
        __m128i m_hi = _mm_loadu_si128((const __m128i *)(shuf_tab + r));
        __m128i m_lo = _mm_loadu_si128((const __m128i *)(shuf_tab + 16 + r));
        __m128i d = _mm_loadu_si128((const __m128i *)(p + r - 16));
        __m128i a = _mm_shuffle_epi8(x, m_hi);           /* x << (16-r) bytes */
        __m128i b = _mm_blendv_epi8(d, _mm_shuffle_epi8(x, m_lo), m_hi);
        x = fold128(a, _mm_set_epi64x((long long)K_X96, (long long)K_X160), b);
    }
    /* 128 -> 64 bits, three independent products. */
    {
        const __m128i k1 = _mm_set_epi64x((long long)K_X64, (long long)K_X96);
        /* d12 = (d1 in qword 0, d2 in qword 1), upper halves zero */
        const __m128i sel = _mm_set_epi8(-128, -128, -128, -128, 11, 10, 9, 8,
                                         -128, -128, -128, -128, 7, 6, 5, 4);
        __m128i d0 = _mm_and_si128(x, _mm_set_epi32(0, 0, 0, -1));
        __m128i d12 = _mm_shuffle_epi8(x, sel);
        t = _mm_xor_si128(
            _mm_clmulepi64_si128(d0,
                                 _mm_cvtsi64_si128((long long)K_X128), 0x00),
            _mm_srli_si128(x, 12));                              /* d3 */
        t = _mm_xor_si128(t, _mm_clmulepi64_si128(d12, k1, 0x00));
        t = _mm_xor_si128(t, _mm_clmulepi64_si128(d12, k1, 0x11));
    }
    /* Barrett reduction 64 -> 32 bits. */
    {
        const __m128i kb = _mm_set_epi64x((long long)K_POLY, (long long)K_MU);
        const __m128i m32 = _mm_set_epi32(0, 0, 0, -1);
        q = _mm_and_si128(
            _mm_clmulepi64_si128(_mm_and_si128(t, m32), kb, 0x00), m32);
        t = _mm_xor_si128(t, _mm_clmulepi64_si128(q, kb, 0x10));
    }
    return (uint32_t)_mm_extract_epi32(t, 1);
}

/* Fold constants of one CRC, (lo, hi) = (clmul with the low, the high 64 bits)
 * for a fold forward over F bits; one set per polynomial, the folding below
 * is shared by every CRC. */
struct kpair { unsigned long long lo, hi; };
struct fold_k {
    struct kpair f2048, f1536, f1024; /* 4 x 512-bit lanes into one */
    struct kpair f512, f384, f256, f128;
};

static const struct fold_k crc32_fk = {
    {K_X2080, K_X2016}, {K_X1568, K_X1504}, {K_X1056, K_X992},
    {K_X544, K_X480}, {K_X416, K_X352}, {K_X288, K_X224}, {K_X160, K_X96},
};

static inline ROCE_T128 __attribute__((always_inline)) __m128i
kv128(struct kpair k)
{
    return _mm_set_epi64x((long long)k.hi, (long long)k.lo);
}

/*
 * Each fold_* helper takes x, the folded state of everything before p, and
 * folds every whole 16-byte block of p[0..n) into it: the n % 16 bytes from
 * p + n - n % 16 on are left to the CRC's finish.
 */
static inline ROCE_T128 __attribute__((always_inline)) __m128i
fold_tail128(__m128i x, const unsigned char *p, size_t n,
             const struct fold_k *fk)
{
    const __m128i k = kv128(fk->f128);
    while (n >= 16) {
        x = fold128(x, k, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    return x;
}

/* From 48 bytes on, x0 and the next 48 bytes start 4 x 128-bit lanes (64
 * bytes per step), reduced to one lane before the 16-byte tail. */
static inline ROCE_T128 __attribute__((always_inline)) __m128i
fold_lanes128(__m128i x0, const unsigned char *p, size_t n,
              const struct fold_k *fk)
{
    if (n >= 48) {
        const __m128i k = kv128(fk->f512);
        __m128i x1 = _mm_loadu_si128((const __m128i *)p);
        __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
        p += 48;
        n -= 48;
        while (n >= 64) {
            x0 = fold128(x0, k, _mm_loadu_si128((const __m128i *)p));
            x1 = fold128(x1, k, _mm_loadu_si128((const __m128i *)(p + 16)));
            x2 = fold128(x2, k, _mm_loadu_si128((const __m128i *)(p + 32)));
            x3 = fold128(x3, k, _mm_loadu_si128((const __m128i *)(p + 48)));
            p += 64;
            n -= 64;
        }
        /* Lanes 0..2 are 384, 256, 128 bits before lane 3: fold in parallel. */
        x0 = clmul_fold(x0, kv128(fk->f384));
        x1 = clmul_fold(x1, kv128(fk->f256));
        x2 = clmul_fold(x2, kv128(fk->f128));
        x0 = _mm_xor_si128(_mm_xor_si128(x0, x1), _mm_xor_si128(x2, x3));
    }
    return fold_tail128(x0, p, n, fk);
}

/* 4 x 128-bit lanes (from ROCE_CLMUL_MIN to 63 bytes, one); inlined into both
 * kernels, the AVX-512 one's short inputs included. */
static inline ROCE_T128 __attribute__((always_inline)) uint32_t
crc_clmul128(uint32_t c, const unsigned char *p, size_t n)
{
    __m128i x;
    if (n < ROCE_CLMUL_MIN)
        return crc_sb8(c, p, n);
    x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p),
                      _mm_cvtsi32_si128((int)c));
    x = fold_lanes128(x, p + 16, n - 16, &crc32_fk);
    return finish128(x, p, n);
}

/* PCLMULQDQ kernel */
static ROCE_T128 uint32_t crc_pclmul(uint32_t c, const unsigned char *p,
                                     size_t n)
{
    return crc_clmul128(c, p, n);
}

#ifdef ROCE_CRC32_AVX512
#define ROCE_T512 \
    __attribute__((target("vpclmulqdq,avx512f,avx512bw,avx512vl,pclmul,sse4.1")))

static inline ROCE_T512 __attribute__((always_inline)) __m512i
kv512(struct kpair k)
{
    return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k.hi, (long long)k.lo));
}

static inline ROCE_T512 __attribute__((always_inline)) __m512i
fold512(__m512i z, __m512i k, __m512i d)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, k, 0x00),
                                     _mm512_clmulepi64_epi128(z, k, 0x11),
                                     d, 0x96);
}

/*
 * As fold_lanes128 with z the folded state of the 64 bytes before p: from 192
 * bytes on, z and the next 192 bytes start 4 x 512-bit lanes (256 bytes per
 * step), reduced to one; that lane takes 64 bytes per step, is reduced to 128
 * bits, and the 16-byte tail follows.
 */
static inline ROCE_T512 __attribute__((always_inline)) __m128i
fold_lanes512(__m512i z, const unsigned char *p, size_t n,
              const struct fold_k *fk)
{
    __m512i k;
    __m128i x;
    if (n >= 192) {
        __m512i z1 = _mm512_loadu_si512((const void *)p);
        __m512i z2 = _mm512_loadu_si512((const void *)(p + 64));
        __m512i z3 = _mm512_loadu_si512((const void *)(p + 128));
        __m512i a, b;
        p += 192;
        n -= 192;
        k = kv512(fk->f2048);
        while (n >= 256) {
            z = fold512(z, k, _mm512_loadu_si512((const void *)p));
            z1 = fold512(z1, k, _mm512_loadu_si512((const void *)(p + 64)));
            z2 = fold512(z2, k, _mm512_loadu_si512((const void *)(p + 128)));
            z3 = fold512(z3, k, _mm512_loadu_si512((const void *)(p + 192)));
            p += 256;
            n -= 256;
        }
        /* z, z1, z2 are 1536, 1024, 512 bits before z3: fold in parallel. */
        k = kv512(fk->f1536);
        a = _mm512_clmulepi64_epi128(z, k, 0x00);
        b = _mm512_clmulepi64_epi128(z, k, 0x11);
        z3 = _mm512_ternarylogic_epi64(z3, a, b, 0x96);
        k = kv512(fk->f1024);
        a = _mm512_clmulepi64_epi128(z1, k, 0x00);
        b = _mm512_clmulepi64_epi128(z1, k, 0x11);
        z3 = _mm512_ternarylogic_epi64(z3, a, b, 0x96);
        z = fold512(z2, kv512(fk->f512), z3);
    }
    k = kv512(fk->f512);
    while (n >= 64) {
        z = fold512(z, k, _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    /* 512 -> 128: lanes 0..2 are 384, 256, 128 bits before lane 3. */
    {
        const __m512i kl = _mm512_set_epi64(
            0, 0, (long long)fk->f128.hi, (long long)fk->f128.lo,
            (long long)fk->f256.hi, (long long)fk->f256.lo,
            (long long)fk->f384.hi, (long long)fk->f384.lo);
        __m512i s = _mm512_ternarylogic_epi64(
            _mm512_clmulepi64_epi128(z, kl, 0x00),
            _mm512_clmulepi64_epi128(z, kl, 0x11),
            _mm512_maskz_mov_epi64(0xC0, z), 0x96);
        __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(s),
                                     _mm512_extracti64x4_epi64(s, 1));
        x = _mm_xor_si128(_mm256_castsi256_si128(h),
                          _mm256_extracti128_si256(h, 1));
    }
    return fold_tail128(x, p, n, fk);
}

/* VPCLMULQDQ kernel: 4 x 512-bit lanes = 256 bytes per step. */
static ROCE_T512 uint32_t crc_avx512(uint32_t c, const unsigned char *p,
                                     size_t n)
{
    __m512i z;
    __m128i x;
    if (n < 64)
        return crc_clmul128(c, p, n);
    z = _mm512_xor_si512(_mm512_loadu_si512((const void *)p),
                         _mm512_castsi128_si512(_mm_cvtsi32_si128((int)c)));
    x = fold_lanes512(z, p + 64, n - 64, &crc32_fk);
    return finish128(x, p, n);
}
#endif /* ROCE_CRC32_AVX512 */
#endif /* ROCE_CRC32_X86 */

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */
/* ------------------------------------------------------------------------ */

typedef uint32_t (*crc_kernel_fn)(uint32_t, const unsigned char *, size_t);

struct crc_kernel {
    const char *name;
    crc_kernel_fn fn;
    int (*supported)(void);
};

#ifdef ROCE_CRC32_X86
static int cpu_has_pclmul(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}
#ifdef ROCE_CRC32_AVX512
static int cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return cpu_has_pclmul() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("vpclmulqdq");
}
#endif
#endif
static int cpu_always(void) { return 1; }

/* In order of preference. */
static const struct crc_kernel crc_kernels[] = {
#ifdef ROCE_CRC32_X86
#ifdef ROCE_CRC32_AVX512
    {"vpclmulqdq-avx512", crc_avx512, cpu_has_avx512},
#endif
    {"pclmulqdq-sse4", crc_pclmul, cpu_has_pclmul},
#endif
    {"slice-by-8", crc_sb8, cpu_always},
};
#define N_KERNELS ((int)(sizeof(crc_kernels) / sizeof(crc_kernels[0])))

/* Index of the kernel in use + 1; 0 = not chosen yet. */
static int crc_active;

static int crc_auto_select(void)
{
    int i;
    crc_tab_once(); /* every kernel uses the tables for short inputs */
    for (i = 0; i < N_KERNELS - 1; i++)
        if (crc_kernels[i].supported())
            break;
    return i + 1;
}

static const struct crc_kernel *crc_current(void)
{
    int a = ROCE_LOAD_ACQ(&crc_active);
    if (a == 0) {
        a = crc_auto_select();
        ROCE_STORE_REL(&crc_active, a);
    }
    return &crc_kernels[a - 1];
}

uint32_t roce_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
    if (len == 0)
        return crc;
    return ~crc_current()->fn(~crc, buf, len);
}

const char *roce_crc32_impl(void)
{
    return crc_current()->name;
}

void roce_crc32_force(const char *name)
{
    int i;
    if (name == NULL) {
        ROCE_STORE_REL(&crc_active, crc_auto_select());
        return;
    }
    for (i = 0; i < N_KERNELS; i++) {
        if (strcmp(name, crc_kernels[i].name) == 0) {
            if (crc_kernels[i].supported()) {
                crc_tab_once();
                ROCE_STORE_REL(&crc_active, i + 1);
            }
            return;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Reflected CRC-16 (InfiniBand's VCRC, IBA 7.8.2)                           */
/* ------------------------------------------------------------------------ */
/*
 * The polynomial arrives from roce.families.ib.crc (roce_crc16r_setup), which
 * owns it; everything here is derived from it.
 *
 * slice-by-8: c16_tab[k][b] is the register after byte b then k zero bytes,
 * from a zero register.  The register's two bytes are xored into the first two
 * message bytes, so eight bytes are one lookup each.
 *
 * pclmulqdq-sse4 and vpclmulqdq-avx512: the CRC-32's folding routines
 * (fold_lanes128, fold_lanes512) with this polynomial's constants, c16_fk; the
 * bit convention of the CRC-32 above (in a block loaded little-endian bit i
 * is the coefficient of x^(127-i) relative to the block's end).  Folding a block forward over F bits:
 *     new = clmul(lo64, x^(F+63) mod P) ^ clmul(hi64, x^(F-1) mod P) ^ next
 * with each constant (degree < 16) stored as bit j <-> x^(63-j): the product's
 * bit k is then the coefficient of x^(126-k), one short of the block's x^(127-k),
 * which the constants' extra x^-1 makes up (F+64 and F bits become F+63 and F-1).
 * The folded 128 bits are congruent, mod P, to everything before the point
 * reached, and a CRC's register from zero depends only on its message mod P:
 * the last 16 bytes of state and the < 16 bytes left go through the tables.
 */
static uint16_t c16_tab[8][256];
static uint16_t c16_poly;  /* 0: not set up */

static uint16_t crc16_sb8(uint16_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        unsigned a = ((unsigned)p[0] | ((unsigned)p[1] << 8)) ^ c;
        c = c16_tab[7][a & 0xffu] ^ c16_tab[6][a >> 8] ^ c16_tab[5][p[2]] ^
            c16_tab[4][p[3]] ^ c16_tab[3][p[4]] ^ c16_tab[2][p[5]] ^
            c16_tab[1][p[6]] ^ c16_tab[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (uint16_t)((c >> 8) ^ c16_tab[0][(c ^ *p++) & 0xffu]);
    return c;
}

#ifdef ROCE_CRC32_X86
/* x^e mod P as stored for a fold: coefficient x^i at bit 63-i. */
static struct fold_k c16_fk;

static uint64_t c16_xpow(unsigned e)
{
    /* the normal (unreflected) polynomial: P = x^16 + reverse(poly) */
    unsigned pn = 0, r = 1, i;
    uint64_t out = 0;
    for (i = 0; i < 16; i++)
        if (c16_poly & (1u << i))
            pn |= 1u << (15 - i);
    while (e--) {
        r <<= 1;
        if (r & 0x10000u)
            r ^= 0x10000u | pn;
    }
    for (i = 0; i < 16; i++)
        if (r & (1u << i))
            out |= 1ULL << (63 - i);
    return out;
}

/* the constants of a fold forward over f bits */
static struct kpair c16_pair(unsigned f)
{
    struct kpair k;
    k.lo = c16_xpow(f + 63);
    k.hi = c16_xpow(f - 1);
    return k;
}

/* the register after p[0..n) (n >= 16), x being the folded state of its whole
 * 16-byte blocks: x's 16 bytes, then the n % 16 bytes after the blocks */
static inline ROCE_T128 __attribute__((always_inline)) uint16_t
finish16(__m128i x, const unsigned char *p, size_t n)
{
    unsigned char b[16];
    _mm_storeu_si128((__m128i *)b, x);
    return crc16_sb8(crc16_sb8(0, b, 16), p + (n & ~(size_t)15), n & 15);
}

static ROCE_T128 uint16_t crc16_pclmul(uint16_t c, const unsigned char *p,
                                        size_t n)
{
    __m128i x;
    if (n < 32)
        return crc16_sb8(c, p, n);
    x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p),
                      _mm_cvtsi32_si128((int)c));
    x = fold_lanes128(x, p + 16, n - 16, &c16_fk);
    return finish16(x, p, n);
}

#ifdef ROCE_CRC32_AVX512
/* 4 x 512-bit lanes = 256 bytes per step (below 256 bytes: the 128-bit kernel). */
static ROCE_T512 uint16_t crc16_avx512(uint16_t c, const unsigned char *p,
                                        size_t n)
{
    __m512i z;
    __m128i x;
    if (n < 256)
        return crc16_pclmul(c, p, n);
    z = _mm512_xor_si512(_mm512_loadu_si512((const void *)p),
                         _mm512_castsi128_si512(_mm_cvtsi32_si128((int)c)));
    x = fold_lanes512(z, p + 64, n - 64, &c16_fk);
    return finish16(x, p, n);
}
#endif /* ROCE_CRC32_AVX512 */
#endif /* ROCE_CRC32_X86 */

typedef uint16_t (*crc16_kernel_fn)(uint16_t, const unsigned char *, size_t);

static const struct {
    const char *name;
    crc16_kernel_fn fn;
    int (*supported)(void);
} crc16_kernels[] = {
#ifdef ROCE_CRC32_X86
#ifdef ROCE_CRC32_AVX512
    {"vpclmulqdq-avx512", crc16_avx512, cpu_has_avx512},
#endif
    {"pclmulqdq-sse4", crc16_pclmul, cpu_has_pclmul},
#endif
    {"slice-by-8", crc16_sb8, cpu_always},
};
#define N_KERNELS16 ((int)(sizeof(crc16_kernels) / sizeof(crc16_kernels[0])))
static int crc16_active; /* index + 1 of the kernel in use; 0 before setup */

static int crc16_auto_select(void)
{
    int i;
    for (i = 0; i < N_KERNELS16 - 1; i++)
        if (crc16_kernels[i].supported())
            break;
    return i + 1;
}

void roce_crc16r_setup(uint16_t poly)
{
    unsigned i, k;
    for (i = 0; i < 256; i++) {
        unsigned c = i;
        for (k = 0; k < 8; k++)
            c = (c >> 1) ^ ((unsigned)poly & (0u - (c & 1u)));
        c16_tab[0][i] = (uint16_t)c;
    }
    for (k = 1; k < 8; k++)
        for (i = 0; i < 256; i++)
            c16_tab[k][i] = (uint16_t)((c16_tab[k - 1][i] >> 8) ^
                                       c16_tab[0][c16_tab[k - 1][i] & 0xffu]);
    c16_poly = poly;
#ifdef ROCE_CRC32_X86
    c16_fk.f2048 = c16_pair(2048);
    c16_fk.f1536 = c16_pair(1536);
    c16_fk.f1024 = c16_pair(1024);
    c16_fk.f512 = c16_pair(512);
    c16_fk.f384 = c16_pair(384);
    c16_fk.f256 = c16_pair(256);
    c16_fk.f128 = c16_pair(128);
#endif
    crc16_active = crc16_auto_select();
}

uint16_t roce_crc16r(uint16_t reg, const unsigned char *buf, size_t len)
{
    if (len == 0 || crc16_active == 0)
        return reg;
    return crc16_kernels[crc16_active - 1].fn(reg, buf, len);
}

const char *roce_crc16r_impl(void)
{
    return crc16_active ? crc16_kernels[crc16_active - 1].name : "none";
}

void roce_crc16r_force(const char *name)
{
    int i;
    if (crc16_active == 0)
        return;
    if (name == NULL) {
        crc16_active = crc16_auto_select();
        return;
    }
    for (i = 0; i < N_KERNELS16; i++)
        if (strcmp(name, crc16_kernels[i].name) == 0 && crc16_kernels[i].supported())
            crc16_active = i + 1;
}
