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
    """
    void put_le64 "roce_put_le64"(unsigned char *p, uint64_t z) nogil
    const uint64_t GAMMA "ROCE_SPLITMIX_GAMMA"


cdef inline uint64_t _splitmix(uint64_t x) noexcept nogil:
    x = (x ^ (x >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    x = (x ^ (x >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return x ^ (x >> 31)


def pattern_expand(uint64_t seed, uint64_t first, Py_ssize_t n):
    """``n`` bytes of the stream of ``seed`` from its word ``first`` on: word i (from 0) of the
    stream is splitmix64's output for seed + (i + 1) * 0x9E3779B97F4A7C15 (mod 2**64),
    little-endian, the last word cut to what ``n`` leaves."""
    if n < 0:
        raise ValueError("a pattern's length is not negative")
    out = PyBytes_FromStringAndSize(NULL, n)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t i, b, words = n >> 3
    # the counter before word ``first`` (unsigned: the arithmetic is mod 2**64)
    cdef uint64_t x = seed + first * GAMMA, z
    with nogil:
        for i in range(words):
            x += GAMMA
            put_le64(p + 8 * i, _splitmix(x))
        if n & 7:
            x += GAMMA
            z = _splitmix(x)
            for b in range(n & 7):
                p[8 * words + b] = <unsigned char>(z >> (8 * b))
    return out
