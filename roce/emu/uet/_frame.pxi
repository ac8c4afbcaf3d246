# The emulator's UET frame in C (roce.emu.uet.uetcodec.frame_fast): one packet shape's plan,
# made by uetcodec._compile from the family's layouts beside the Python encoder it generates
# (the same fields, bit places, checks and flags), run over a field dictionary's values; the
# frame's prefix is the path's template with its five per-packet fields patched at the places
# uetcodec gives (uet_frame_configure).  No layout, width or place is written here.
# Twin: the generated Python encoder of the same shape (``frm``), held to this on random field
# dictionaries by tests/test_uet_codec.py.
# What this leaves to Python (UF_MISS back): a value that is not an int or a bool (Python's
# encoder says what it makes of it), another shape's values, a payload without the buffer
# protocol.  None back is the Python encoder's None: a value out of its field's range.

from cpython.object cimport PyObject
from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong,
                           PyLong_AsUnsignedLongLongMask, PyLong_CheckExact)
from cpython.bool cimport PyBool_Check
from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

DEF UF_FIELDS = 64
DEF UF_VALUES = 64

cdef object UF_MISS = None
cdef int UF_AT[5]  # the prefix's IPv4 total length, identification, checksum, UDP source port, length
cdef int UF_PREFIX = -1, UF_IPUDP = 0, UF_IP = 0, UF_MIN = 0
cdef uint64_t UF_PSN_MASK = 0


def uet_frame_configure(dict cfg):
    """The places of the prefix's patched fields (``at``: IPv4 total length, identification,
    checksum, UDP source port, UDP length), the prefix's size, the IPv4 and UDP headers'
    sizes, the shortest frame, the PSN mask, and the object that says "Python decides"."""
    global UF_MISS, UF_PREFIX, UF_IPUDP, UF_IP, UF_MIN, UF_PSN_MASK
    cdef int i
    at = cfg["at"]
    for i in range(5):
        UF_AT[i] = at[i]
    UF_PREFIX, UF_IP, UF_IPUDP = cfg["prefix"], cfg["ip"], cfg["ip"] + cfg["udp"]
    UF_MIN, UF_PSN_MASK, UF_MISS = cfg["min_frame"], cfg["psn_mask"], cfg["miss"]


cdef class UetFramePlan:
    """One shape's plan: the values that choose it, the flags, the derived PSN offsets, and
    every field's source, place and check (uetcodec._compile's ``plan``)."""
    cdef int nvals, size, nflags, nder, nf, syn_mask, syn_bit
    cdef int choose[UF_VALUES]      # 0: no; 1: must equal choose_v; 2: its truth must be choose_v
    cdef int64_t choose_v[UF_VALUES]
    cdef int flag_i[8]
    cdef int flag_low[8]
    cdef int flag_multi[8]
    cdef int64_t flag_mask[8]
    cdef int der_a[4]  # the PSN's place in the values (-1: 0)
    cdef int der_b[4]  # the base's
    cdef int der_signed[4]
    cdef int kind[UF_FIELDS]        # 0 a constant, 1 a value, 2 a derived offset, 3 the flags
    cdef int ref[UF_FIELDS]
    cdef int bit_end[UF_FIELDS]
    cdef int bits[UF_FIELDS]
    cdef int check[UF_FIELDS]       # 0 none, 1 unsigned within its bits, 2 signed 16 bits
    cdef int64_t const[UF_FIELDS]

    def __init__(self, tuple spec):
        size, nvals, choosers, flags, syn, derived, fields = spec
        if nvals > UF_VALUES or len(fields) > UF_FIELDS or len(flags) > 8 or len(derived) > 4:
            raise ValueError("UetFramePlan: a shape larger than the plan holds")
        self.size, self.nvals = size, nvals
        cdef int i
        for i in range(nvals):
            self.choose[i] = 0
        for i, kind, v in choosers:
            self.choose[i], self.choose_v[i] = kind, v
        self.nflags = len(flags)
        for j, (i, mask, low, multi) in enumerate(flags):
            self.flag_i[j], self.flag_mask[j], self.flag_low[j], self.flag_multi[j] = \
                i, mask, low, multi
        self.syn_mask, self.syn_bit = syn
        self.nder = len(derived)
        for j, (a, b, signed) in enumerate(derived):
            self.der_a[j], self.der_b[j], self.der_signed[j] = a, b, signed
        self.nf = len(fields)
        for j, (kind, ref, bit_end, bits, check, const) in enumerate(fields):
            if not 0 < bits <= 64 or bit_end > 8 * size:
                raise ValueError("UetFramePlan: a field outside its header")
            self.kind[j], self.ref[j], self.bit_end[j], self.bits[j] = kind, ref, bit_end, bits
            self.check[j], self.const[j] = check, const


cdef inline bint uf_fits(int64_t v, int ovf, PyObject *x, int bits, int check) noexcept:
    """Whether a value passes its field's check: 1 unsigned within ``bits``, 2 a signed
    16-bit offset (0: none, a value of the shape or the flags); ``x`` the int itself where
    it is past int64 (``ovf``)."""
    if check == 2:
        return ovf == 0 and -0x8000 <= v <= 0x7FFF
    if check == 1:
        if bits == 64:
            if ovf == 0:
                return v >= 0
            if ovf < 0:
                return False
            PyLong_AsUnsignedLongLong(<object>x)  # a positive int past int64: within 64 bits?
            if PyErr_Occurred():
                PyErr_Clear()
                return False
            return True
        return ovf == 0 and 0 <= v <= ((<int64_t>1 << bits) - 1)
    return True


cdef inline void uf_put(uint8_t *h, uint64_t v, int bit_end, int bits) noexcept nogil:
    """OR ``v`` (``bits`` wide) into the header ``h`` ending at bit ``bit_end``, big-endian."""
    cdef int k = (bit_end - 1) >> 3, shift = 8 * (k + 1) - bit_end, left = bits
    h[k] |= <uint8_t>((v << shift) & 0xFF)
    v >>= 8 - shift
    left -= 8 - shift
    while left > 0:
        k -= 1
        h[k] |= <uint8_t>(v & 0xFF)
        v >>= 8
        left -= 8


cdef inline void uf_be16(uint8_t *p, int at, int64_t v) noexcept nogil:
    p[at] = <uint8_t>((v >> 8) & 0xFF)
    p[at + 1] = <uint8_t>(v & 0xFF)


def uet_frame(UetFramePlan plan, dict fields, bytes template, int64_t base, object sport,
              object ipid, object payload):
    """The frame of ``fields`` + ``payload`` by ``plan`` on the path of ``template`` (its
    prefix, ``base`` the ones' complement sum of its fixed IPv4 words); None where the Python
    encoder gives None; UF_MISS where Python decides."""
    if UF_PREFIX < 0:
        raise RuntimeError("uet_frame: uet_frame_configure was not called")
    cdef int64_t val[UF_VALUES]
    cdef uint64_t low64[UF_VALUES]
    cdef int ovf[UF_VALUES]
    cdef PyObject *obj[UF_VALUES]  # borrowed: the dict holds them throughout
    cdef int64_t der[4]
    cdef Py_ssize_t pos = 0, i = 0, total, n
    cdef object key, x
    cdef PyObject *kp
    cdef PyObject *vp
    cdef int j, o, fl = 0
    cdef int64_t v, s, sp, ip
    cdef uint64_t w
    cdef Py_buffer buf
    if PyDict_Size(fields) != plan.nvals or PyBytes_GET_SIZE(template) != UF_PREFIX:
        return UF_MISS
    while PyDict_Next(fields, &pos, &kp, &vp):
        x = <object>vp
        if not (PyLong_CheckExact(x) or PyBool_Check(x)):
            return UF_MISS
        obj[i] = vp
        o = 0
        val[i] = PyLong_AsLongLongAndOverflow(x, &o)
        ovf[i] = o
        low64[i] = PyLong_AsUnsignedLongLongMask(x) if o else <uint64_t>val[i]
        i += 1
    # the values that chose this shape, as Python's encoder tests them first
    for i in range(plan.nvals):
        if plan.choose[i] == 1 and (ovf[i] or val[i] != plan.choose_v[i]):
            return UF_MISS
        if plan.choose[i] == 2 and ((ovf[i] != 0 or val[i] != 0) != (plan.choose_v[i] != 0)):
            return UF_MISS  # (its truth, not the one the shape was chosen with)
    if not (PyLong_CheckExact(sport) and PyLong_CheckExact(ipid)):
        return UF_MISS
    for j in range(plan.nflags):  # composed as build.compose_flags composes them
        i = plan.flag_i[j]
        if ovf[i] == 0 and val[i] == 0:
            continue
        if not plan.flag_multi[j]:
            if ovf[i] or val[i] != 1:
                return None
            fl |= <int>plan.flag_mask[j]
        else:
            if ovf[i] or val[i] < 0 or val[i] > 0x7F or (val[i] << plan.flag_low[j]) > 0x7F \
                    or (val[i] << plan.flag_low[j]) & (~plan.flag_mask[j] & 0x7F):
                return None
            fl |= <int>(val[i] << plan.flag_low[j])
    if (fl & plan.syn_mask) != plan.syn_bit:
        return None
    for j in range(plan.nder):  # the PSN offsets given as the PSNs they stand for
        w = ((low64[plan.der_a[j]] if plan.der_a[j] >= 0 else 0)
             - (low64[plan.der_b[j]] if plan.der_b[j] >= 0 else 0)) & UF_PSN_MASK
        der[j] = <int64_t>w
        if plan.der_signed[j] and w & 0x80000000:
            der[j] = <int64_t>w - 0x100000000
    # every field checked before any byte is made
    for j in range(plan.nf):
        if plan.kind[j] == 1:
            i = plan.ref[j]
            if not uf_fits(val[i], ovf[i], obj[i], plan.bits[j], plan.check[j]):
                return None
        elif plan.kind[j] == 2:
            if not uf_fits(der[plan.ref[j]], 0, NULL, plan.bits[j], plan.check[j]):
                return None
        elif plan.kind[j] == 0:
            if not uf_fits(plan.const[j], 0, NULL, plan.bits[j], plan.check[j]):
                return None
    if PyObject_GetBuffer(payload, &buf, PyBUF_SIMPLE) != 0:
        PyErr_Clear()
        return UF_MISS
    n = plan.size + UF_IPUDP + buf.len  # the IPv4 total length
    if n > 0xFFFF:
        PyBuffer_Release(&buf)
        return None
    o = 0
    sp = PyLong_AsLongLongAndOverflow(sport, &o)
    if o or not 0 <= sp <= 0xFFFF:
        PyBuffer_Release(&buf)
        return None
    ip = PyLong_AsLongLongAndOverflow(ipid, &o)
    if o or not 0 <= ip <= 0xFFFF:
        PyBuffer_Release(&buf)
        return None
    total = UF_PREFIX + plan.size + buf.len
    cdef Py_ssize_t made = total if total >= UF_MIN else UF_MIN
    out = PyBytes_FromStringAndSize(NULL, made)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    memcpy(p, PyBytes_AS_STRING(template), UF_PREFIX)
    memset(p + UF_PREFIX, 0, plan.size)
    memcpy(p + UF_PREFIX + plan.size, buf.buf, buf.len)
    PyBuffer_Release(&buf)
    if made > total:
        memset(p + total, 0, made - total)
    s = base + n + ip  # RFC 1071, the fixed words' sum kept per path
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    uf_be16(p, UF_AT[0], n)
    uf_be16(p, UF_AT[1], ip)
    uf_be16(p, UF_AT[2], ~s & 0xFFFF)
    uf_be16(p, UF_AT[3], sp)
    uf_be16(p, UF_AT[4], n - UF_IP)
    cdef uint8_t *h = p + UF_PREFIX
    for j in range(plan.nf):
        if plan.kind[j] == 0:
            w = <uint64_t>plan.const[j]
        elif plan.kind[j] == 1:
            w = low64[plan.ref[j]]
        elif plan.kind[j] == 2:
            w = <uint64_t>der[plan.ref[j]]
        else:
            w = <uint64_t>fl
        if plan.check[j] == 2:
            w &= 0xFFFF
        if w:
            uf_put(h, w, plan.bit_end[j], plan.bits[j])
    return out

