# A wire's serialization clock in C: start + ceil(bits * num / den) in 128-bit arithmetic.
# Twin: roce.emu.net.serial.serial_end_reference (hypothesis test in tests/test_net_units.py);
# arguments outside the 64-bit domain, or an end past it, take the reference's Python integers.

cdef extern from *:
    """
    /* start + ceil(bits * num / den) for start, bits >= 0 and num, den > 0; -1 when the end
       lies past INT64_MAX */
    static inline int64_t roce_serial_end(int64_t start, int64_t bits, int64_t num,
                                          int64_t den) {
        unsigned __int128 p = (unsigned __int128)(uint64_t)bits * (uint64_t)num;
        unsigned __int128 q = (p + (uint64_t)den - 1) / (uint64_t)den;
        if (q > (unsigned __int128)(uint64_t)(INT64_MAX - start)) return -1;
        return start + (int64_t)q;
    }
    """
    int64_t c_serial_end "roce_serial_end"(int64_t start, int64_t bits, int64_t num,
                                            int64_t den) nogil


cpdef serial_end(start, bits, num, den):
    """Twin of roce.emu.net.serial.serial_end_reference: ``start + ceil(bits * num / den)``."""
    cdef int64_t s, b, n, d, out
    if type(start) is int and type(bits) is int and type(num) is int and type(den) is int:
        try:
            s, b, n, d = start, bits, num, den
        except OverflowError:
            return start - (-bits * num // den)
        if s >= 0 and b >= 0 and n > 0 and d > 0:
            out = c_serial_end(s, b, n, d)
            if out >= 0:
                return out
    return start - (-bits * num // den)
