# A header's codec in C: the twin of the codec roce.headers generates (as Python source) for
# a layout of integer and boolean fields.  Fields are read and written where the layout puts
# them (bit offsets from the header's end, each within 8 bytes); nothing about a header is
# known here.  Whatever the fast case does not cover goes to the generated codec, which is
# handed in (``slow``): a buffer that is not bytes or too short, a value that is not an int
# in range, a missing field.  Twin test: tests/test_headers_codec.py (hypothesis).

from cpython.object cimport PyObject_GetItem
from cpython.long cimport PyLong_CheckExact, PyLong_AsUnsignedLongLong
from cpython.bool cimport PyBool_Check


cdef class HeaderCodec:
    """One layout's fields (``fields``: (name, shift, bits, is_bool) each, in layout order;
    ``size``: the header's bytes): ``decode`` and ``encode`` as roce.headers' generated pair,
    ``slow_decode`` and ``slow_encode`` taking over where the fast case ends."""

    cdef readonly Py_ssize_t size
    cdef tuple names
    cdef Py_ssize_t n
    cdef Py_ssize_t first[64]  # the field's first byte from the header's start
    cdef Py_ssize_t last[64]  # its last byte
    cdef int low[64]  # its shift within the bytes read (the layout's shift mod 8)
    cdef uint64_t mask[64]
    cdef bint boolean[64]
    cdef object slow_decode, slow_encode

    def __init__(self, Py_ssize_t size, tuple fields, slow_decode, slow_encode):
        cdef Py_ssize_t i, shift, bits
        if len(fields) > 64:
            raise ValueError("HeaderCodec: more than 64 fields")
        self.size = size
        self.n = len(fields)
        self.names = tuple(f[0] for f in fields)
        for i in range(self.n):
            _, shift, bits, is_bool = fields[i]
            if bits < 1 or bits > 64 or shift < 0 or shift + bits > 8 * size:
                raise ValueError(f"HeaderCodec: field {fields[i][0]!r} out of the header")
            self.first[i] = size - 1 - (shift + bits - 1) // 8
            self.last[i] = size - 1 - shift // 8
            if self.last[i] - self.first[i] + 1 > 8:
                raise ValueError(f"HeaderCodec: field {fields[i][0]!r} spans more than 8 bytes")
            self.low[i] = shift % 8
            self.mask[i] = (<uint64_t>-1) if bits == 64 else ((<uint64_t>1 << bits) - 1)
            self.boolean[i] = bool(is_bool)
        self.slow_decode, self.slow_encode = slow_decode, slow_encode

    def decode(self, buf, offset=0):
        """The fields of the header at ``offset`` of ``buf``, a new dict."""
        if (not PyBytes_Check(buf) or not PyLong_CheckExact(offset) or offset < 0
                or offset + self.size > PyBytes_GET_SIZE(buf)):
            return self.slow_decode(buf, offset)
        cdef Py_ssize_t at = offset
        cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(buf) + at
        cdef dict out = {}
        cdef Py_ssize_t i, b
        cdef uint64_t v
        for i in range(self.n):
            v = 0
            for b in range(self.first[i], self.last[i] + 1):
                v = (v << 8) | p[b]
            v = (v >> self.low[i]) & self.mask[i]
            if self.boolean[i]:
                out[self.names[i]] = v != 0
            else:
                out[self.names[i]] = PyLong_FromUnsignedLongLong(v)
        return out

    def encode(self, d):
        """The header's bytes for the field values of ``d``."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, self.size)
        cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
        cdef Py_ssize_t i, b
        cdef uint64_t v
        memset(p, 0, self.size)
        for i in range(self.n):
            try:
                x = PyObject_GetItem(d, self.names[i])
            except Exception:  # a missing field (or no mapping): the generated encoder's
                return self.slow_encode(d)
            if not (PyLong_CheckExact(x) or PyBool_Check(x)) or x < 0:
                return self.slow_encode(d)
            try:
                v = PyLong_AsUnsignedLongLong(x)
            except OverflowError:
                return self.slow_encode(d)
            if v > self.mask[i]:
                return self.slow_encode(d)
            v <<= self.low[i]
            for b in range(self.last[i], self.first[i] - 1, -1):
                p[b] |= v & 0xFF
                v >>= 8
        return out
