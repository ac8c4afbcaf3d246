# The seeded payload pattern's expansion in C: splitmix64's output over a counter, the words
# written little-endian.  Twin: roce.emu.core.payload.expand_reference (Python integers, every
# word at once in 128-bit lanes); the same bytes for every seed and length (hypothesis test in
# tests/test_emu_payload.py).

cdef extern from *:
    """
    #include <string.h>
    /* splitmix64's counter step (Vigna, splitmix64.c) */
    #define ROCE_SPLITMIX_GAMMA 0x9E3779B97F4A7C15ULL
    /* a word little-endian: one store where the host is (the build's -O1 does not merge
       byte stores), byte by byte elsewhere */
    static inline void roce_put_le64(unsigned char *p, uint64_t z) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(p, &z, 8);
    #else
        for (int b = 0; b < 8; b++) p[b] = (unsigned char)(z >> (8 * b));
    #endif
    }
    #define ROCE_SPLITMIX_M1 0xBF58476D1CE4E5B9ULL
    #define ROCE_SPLITMIX_M2 0x94D049BB133111EBULL
    static inline uint64_t roce_splitmix(uint64_t x) {
        x = (x ^ (x >> 30)) * ROCE_SPLITMIX_M1;
        x = (x ^ (x >> 27)) * ROCE_SPLITMIX_M2;
        return x ^ (x >> 31);
    }
    /* Words [0, words) of the stream whose counter before word 0 is x, into p: eight at a
       time where the CPU has AVX-512 (a word needs only its counter, so eight lanes hold
       eight counters; AVX-512DQ multiplies 64-bit lanes), one at a time elsewhere.  The
       same bytes either way: tests/test_emu_payload.py holds them to the reference.  The
       kernel has its own target attribute and is chosen at run time, as the ICRC's are
       (roce/_crc32.c). */
    #if defined(__x86_64__) && defined(__GNUC__) && !defined(ROCE_PATTERN_NO_SIMD)
    #include <immintrin.h>
    #define ROCE_PATTERN_AVX512 1
    __attribute__((target("avx512f,avx512dq")))
    static uint64_t roce_expand8(unsigned char *p, uint64_t x, Py_ssize_t blocks) {
        const __m512i m1 = _mm512_set1_epi64((long long)ROCE_SPLITMIX_M1);
        const __m512i m2 = _mm512_set1_epi64((long long)ROCE_SPLITMIX_M2);
        const __m512i step = _mm512_set1_epi64((long long)(8 * ROCE_SPLITMIX_GAMMA));
        __m512i c = _mm512_set_epi64(
            (long long)(x + 8 * ROCE_SPLITMIX_GAMMA), (long long)(x + 7 * ROCE_SPLITMIX_GAMMA),
            (long long)(x + 6 * ROCE_SPLITMIX_GAMMA), (long long)(x + 5 * ROCE_SPLITMIX_GAMMA),
            (long long)(x + 4 * ROCE_SPLITMIX_GAMMA), (long long)(x + 3 * ROCE_SPLITMIX_GAMMA),
            (long long)(x + 2 * ROCE_SPLITMIX_GAMMA), (long long)(x + ROCE_SPLITMIX_GAMMA));
        for (Py_ssize_t i = 0; i < blocks; i++) {
            __m512i z = c;
            z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), m1);
            z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), m2);
            z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
            _mm512_storeu_si512((void *)(p + 64 * i), z);  /* x86 is little-endian */
            c = _mm512_add_epi64(c, step);
        }
        return x + (uint64_t)blocks * 8 * ROCE_SPLITMIX_GAMMA;
    }
    static int roce_has_avx512dq(void) {
        static int has = -1;
        if (has < 0) {
            __builtin_cpu_init();
            has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
        }
        return has;
    }
    #endif
    /* the counter after the words written */
    static uint64_t roce_expand_words(unsigned char *p, uint64_t x, Py_ssize_t words) {
        Py_ssize_t i = 0;
    #ifdef ROCE_PATTERN_AVX512
        if (words >= 8 && roce_has_avx512dq()) {
            x = roce_expand8(p, x, words / 8);
            i = words & ~(Py_ssize_t)7;
        }
    #endif
        for (; i < words; i++) {
            x += ROCE_SPLITMIX_GAMMA;
            roce_put_le64(p + 8 * i, roce_splitmix(x));
        }
        return x;
    }
    """
    uint64_t splitmix "roce_splitmix"(uint64_t x) nogil
    uint64_t expand_words "roce_expand_words"(unsigned char *p, uint64_t x,
                                              Py_ssize_t words) nogil
    const uint64_t GAMMA "ROCE_SPLITMIX_GAMMA"


def pattern_expand(uint64_t seed, uint64_t first, Py_ssize_t n):
    """``n`` bytes of the stream of ``seed`` from its word ``first`` on: word i (from 0) of the
    stream is splitmix64's output for seed + (i + 1) * 0x9E3779B97F4A7C15 (mod 2**64),
    little-endian, the last word cut to what ``n`` leaves."""
    if n < 0:
        raise ValueError("a pattern's length is not negative")
    out = PyBytes_FromStringAndSize(NULL, n)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t b, words = n >> 3
    # the counter before word ``first`` (unsigned: the arithmetic is mod 2**64)
    cdef uint64_t x = seed + first * GAMMA, z
    # the GIL kept: a piece is made in a fraction of a microsecond, less than releasing and
    # taking it back costs (bench/RESULTS.md, "roce against ns-3")
    x = expand_words(p, x, words)
    if n & 7:
        x += GAMMA
        z = splitmix(x)
        for b in range(n & 7):
            p[8 * words + b] = <unsigned char>(z >> (8 * b))
    return out
