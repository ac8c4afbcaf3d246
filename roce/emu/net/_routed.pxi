# A switch hop's rewrite in C: new MACs, TTL - 1, CE on request, the IPv4 header checksum
# updated incrementally (RFC 1624).  Twin: roce.emu.net.hop.routed_reference (hypothesis
# test in tests/test_routed.py).  The offsets and the RFC 1624 constants come from
# roce.emu.net.hop (routed_configure); nothing about the layout is known here.

cdef int RT_MACS = -1   # bytes of dst + src MAC at the frame's start
cdef int RT_TOS = 0, RT_TTL = 0, RT_CSUM = 0
cdef uint32_t RT_TOS_C = 0, RT_TTL_C = 0
cdef uint8_t RT_CE_BITS = 0


def routed_configure(int macs, int tos, int ttl, int csum, uint32_t tos_c, uint32_t ttl_c,
                     int ce_bits):
    global RT_MACS, RT_TOS, RT_TTL, RT_CSUM, RT_TOS_C, RT_TTL_C, RT_CE_BITS
    RT_MACS, RT_TOS, RT_TTL, RT_CSUM = macs, tos, ttl, csum
    RT_TOS_C, RT_TTL_C, RT_CE_BITS = tos_c, ttl_c, ce_bits


cpdef routed(bytes frame, bytes src_mac, bytes dst_mac, bint mark_ce):
    """Twin of roce.emu.net.hop.routed_reference: one copy of the frame, patched."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(frame)
    if RT_MACS < 0:
        raise RuntimeError("routed: routed_configure was not called")
    if n <= RT_CSUM + 1 or n <= RT_TTL or n <= RT_TOS:
        raise ValueError("routed: frame of %d bytes is shorter than its IPv4 header" % n)
    if PyBytes_GET_SIZE(src_mac) + PyBytes_GET_SIZE(dst_mac) != RT_MACS:
        raise ValueError("routed: MACs of %d + %d bytes, expected %d in all"
                         % (PyBytes_GET_SIZE(dst_mac), PyBytes_GET_SIZE(src_mac), RT_MACS))
    cdef bytes out = PyBytes_FromStringAndSize(PyBytes_AS_STRING(frame), n)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t nd = PyBytes_GET_SIZE(dst_mac)
    cdef uint32_t tos = p[RT_TOS], ttl = p[RT_TTL]
    cdef uint32_t new_tos = (tos | RT_CE_BITS) if mark_ce else tos
    cdef uint32_t new_ttl = ttl - 1 if ttl else 0
    cdef uint32_t x = (((~((p[RT_CSUM] << 8) | p[RT_CSUM + 1])) & 0xFFFF) + RT_TOS_C
                       + ((~tos) & 0xFF) + new_tos + RT_TTL_C
                       + ((((~ttl) & 0xFF) + new_ttl) << 8))
    x = (x & 0xFFFF) + (x >> 16)
    x = (x & 0xFFFF) + (x >> 16)
    x = (~x) & 0xFFFF
    memcpy(p, PyBytes_AS_STRING(dst_mac), nd)
    memcpy(p + nd, PyBytes_AS_STRING(src_mac), RT_MACS - nd)
    p[RT_TOS] = new_tos
    p[RT_TTL] = new_ttl
    p[RT_CSUM] = x >> 8
    p[RT_CSUM + 1] = x & 0xFF
    return out
