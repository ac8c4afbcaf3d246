# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The fast path: header walk, ICRC, bulk header scan and PSN sequencing in C.

Every function here has a pure-Python twin (``roce.locate.walk``, ``roce.icrc``,
``roce.psn``) and hypothesis tests prove that they agree.  Nothing here knows a header
layout by itself: ``configure()`` is handed the field positions, header sizes, opcode plans
and ICRC masks that ``roce.fast`` derives from ``roce.headers`` and ``roce.opcodes``.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset
from libc.stdlib cimport free, malloc, realloc
from cython.parallel cimport prange

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    static int roce_omp_threads(void) { return omp_get_max_threads(); }
    #else
    static int roce_omp_threads(void) { return 1; }
    #endif
    """
    int omp_threads "roce_omp_threads"() nogil
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_Check, PyBytes_FromStringAndSize
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_ITEM
from cpython.dict cimport PyDict_SetItem
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.string cimport strlen
from cpython.ref cimport Py_INCREF
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

cdef extern from "_crc32.h":
    uint32_t roce_crc32(uint32_t crc, const unsigned char *buf, size_t len) nogil
    const char *roce_crc32_impl()
    void roce_crc32_force(const char *name)
    void roce_crc16r_setup(uint16_t poly)
    uint16_t roce_crc16r(uint16_t reg, const unsigned char *buf, size_t len) nogil
    const char *roce_crc16r_impl()
    void roce_crc16r_force(const char *name)

# -- configuration, filled by configure() ------------------------------------------------------

DEF NFIELDS = 31
DEF MAXEXT = 6
DEF MAXKEY = 3

cdef int F_OFF[NFIELDS]
cdef int F_N[NFIELDS]
cdef int F_SHIFT[NFIELDS]
cdef uint32_t F_MASK[NFIELDS]
# Indexes into the field table; the order is roce.locate.FAST_FIELDS.
cdef enum:
    F_ETH_TYPE = 0
    F_VLAN_ETYPE = 1
    F_SLL_ETYPE = 2
    F_SLL2_ETYPE = 3
    F_IP_VERSION = 4
    F_IP_IHL = 5
    F_IP_LEN = 6
    F_IP_MF = 7
    F_IP_FRAG = 8
    F_IP_PROTO = 9
    F_IP6_VERSION = 10
    F_IP6_PLEN = 11
    F_IP6_NXT = 12
    F_UDP_DPORT = 13
    F_UDP_LEN = 14
    F_GRH_PAYLEN = 15
    F_GRH_NXTHDR = 16
    F_BTH_OPCODE = 17
    F_BTH_PADCNT = 18
    F_BTH_TVER = 19
    F_BTH_DESTQP = 20
    F_BTH_PSN = 21
    F_BTH_PKEY = 22
    F_BTH_SE = 23
    F_BTH_M = 24
    F_BTH_FECN = 25
    F_BTH_BECN = 26
    F_BTH_A = 27
    F_IP_ECN = 28
    F_IP6_TCLASS = 29
    F_IP_CHECKSUM = 30
cdef int FL_SE, FL_M, FL_FECN, FL_BECN, FL_A

cdef int SZ_ETH, SZ_VLAN, SZ_SLL, SZ_SLL2, SZ_IP, SZ_IP6, SZ_UDP, SZ_GRH, SZ_BTH
cdef int H_FRAME, H_ETH, H_VLAN, H_SLL, H_SLL2, H_IP, H_IP6, H_UDP, H_GRH, H_BTH, H_PAYLOAD
cdef int S_OK, S_NR_ETHERTYPE, S_NR_PROTO, S_NR_PORT, S_NR_FRAGMENT, S_NR_LINKTYPE
cdef int S_TRUNC, S_IP_VERSION, S_IP_HDRLEN, S_L3_LENGTH, S_UDP_LENGTH, S_TVER, S_OPCODE
cdef int S_PADCNT, S_PAYLOAD, S_PAYLOAD_LEN, S_GRH_NEXT
cdef int ET_IPV4, ET_IPV6, ET_ROCEV1, ET_VLAN0, ET_VLAN1, ET_VLAN2, MAX_VLANS
cdef int GRH_NEXT, LT_ETH, LT_RAW, LT_SLL, LT_SLL2
cdef int L3K_NONE, L3K_GRH, L3K_IPV4, L3K_IPV6  # roce.locate.L3_*: the one numbering
cdef int L3K_LRH, L3K_LRH_GRH, LT_IB, S_NR_LNH, H_LRH
# Native InfiniBand's LRH fields (roce.locate.LRH_FIELDS order: lnh, pktlen, dlid, slid, vl,
# sl), read with lrd(); the LRH size and the VL bits the ICRC masks (roce.icrc).
DEF NLRH = 6
cdef int L_OFF[NLRH]
cdef int L_N[NLRH]
cdef int L_SHIFT[NLRH]
cdef uint32_t L_MASK[NLRH]
cdef int IB_LRH = 8
cdef uint8_t IB_VL_MASK = 0

cdef int OP_VALID[256]  # bit LK_ROCE / LK_IB: the links whose walk accepts the opcode
cdef int LK_ROCE = 1
cdef int LK_IB = 2
cdef int OP_NEXT[256]
cdef int OP_HID[256][MAXEXT]
cdef int OP_HSZ[256][MAXEXT]
cdef int OP_PAYLOAD[256]
cdef int OP_FIXED[256]
# first extended header's key fields: offset from BTH start, bytes, shift, mask
cdef int K_OFF[256][MAXKEY]
cdef int K_N[256][MAXKEY]
cdef int K_SHIFT[256][MAXKEY]
cdef uint64_t K_MASK[256][MAXKEY]
cdef int K_COUNT[256]

cdef uint8_t M_IP[64]
cdef uint8_t M_IP6[40]
cdef uint8_t M_GRH[40]
cdef uint8_t M_UDP[8]
cdef uint8_t M_BTH[12]
cdef int M_IP_LEN = 0

cdef object WalkType = tuple
cdef bint configured = False



def configure(dict cfg):
    """Receive layouts, opcode plans and masks derived from roce.headers / roce.opcodes."""
    global SZ_ETH, SZ_VLAN, SZ_SLL, SZ_SLL2, SZ_IP, SZ_IP6, SZ_UDP, SZ_GRH, SZ_BTH
    global H_FRAME, H_ETH, H_VLAN, H_SLL, H_SLL2, H_IP, H_IP6, H_UDP, H_GRH, H_BTH, H_PAYLOAD
    global S_OK, S_NR_ETHERTYPE, S_NR_PROTO, S_NR_PORT, S_NR_FRAGMENT, S_NR_LINKTYPE
    global S_TRUNC, S_IP_VERSION, S_IP_HDRLEN, S_L3_LENGTH, S_UDP_LENGTH, S_TVER, S_OPCODE
    global S_PADCNT, S_PAYLOAD, S_PAYLOAD_LEN, S_GRH_NEXT
    global ET_IPV4, ET_IPV6, ET_ROCEV1, ET_VLAN0, ET_VLAN1, ET_VLAN2, MAX_VLANS
    global GRH_NEXT, LT_ETH, LT_RAW, LT_SLL, LT_SLL2, WalkType, configured, M_IP_LEN
    global L3K_NONE, L3K_GRH, L3K_IPV4, L3K_IPV6, L3K_LRH, L3K_LRH_GRH, LT_IB, S_NR_LNH, H_LRH
    global IB_LRH, IB_VL_MASK, LK_ROCE, LK_IB
    global FL_SE, FL_M, FL_FECN, FL_BECN, FL_A
    cdef int i, j, code
    specs = cfg["fields"]
    if len(specs) != NFIELDS:
        raise ValueError("fast path: field table has %d entries, expected %d"
                         % (len(specs), NFIELDS))
    for i, (off, n, shift, mask) in enumerate(specs):
        F_OFF[i], F_N[i], F_SHIFT[i], F_MASK[i] = off, n, shift, mask
    size = cfg["sizes"]
    SZ_ETH, SZ_VLAN, SZ_SLL, SZ_SLL2 = size["eth"], size["vlan"], size["sll"], size["sll2"]
    SZ_IP, SZ_IP6, SZ_UDP, SZ_GRH, SZ_BTH = (size["ip"], size["ipv6"], size["udp"],
                                             size["grh"], size["bth"])
    hid = cfg["hid"]
    H_FRAME, H_ETH, H_VLAN, H_SLL, H_SLL2 = (hid["frame"], hid["eth"], hid["vlan"], hid["sll"],
                                             hid["sll2"])
    H_IP, H_IP6, H_UDP, H_GRH, H_BTH, H_PAYLOAD = (hid["ip"], hid["ipv6"], hid["udp"],
                                                   hid["grh"], hid["bth"], hid["payload"])
    st = cfg["status"]
    S_OK, S_NR_ETHERTYPE, S_NR_PROTO, S_NR_PORT = (st["OK"], st["NR_ETHERTYPE"],
                                                   st["NR_PROTO"], st["NR_PORT"])
    S_NR_FRAGMENT, S_NR_LINKTYPE, S_TRUNC = st["NR_FRAGMENT"], st["NR_LINKTYPE"], st["BAD_TRUNCATED"]
    S_IP_VERSION, S_IP_HDRLEN, S_L3_LENGTH = (st["BAD_IP_VERSION"], st["BAD_IP_HDRLEN"],
                                              st["BAD_L3_LENGTH"])
    S_UDP_LENGTH, S_TVER, S_OPCODE = st["BAD_UDP_LENGTH"], st["BAD_TVER"], st["BAD_OPCODE"]
    S_PADCNT, S_PAYLOAD = st["BAD_PADCNT"], st["BAD_PAYLOAD"]
    S_PAYLOAD_LEN, S_GRH_NEXT = st["BAD_PAYLOAD_LEN"], st["BAD_GRH_NEXT"]
    c = cfg["const"]
    ET_IPV4, ET_IPV6, ET_ROCEV1 = c["ETHERTYPE_IPV4"], c["ETHERTYPE_IPV6"], c["ETHERTYPE_ROCEV1"]
    ET_VLAN0, ET_VLAN1, ET_VLAN2 = c["ETHERTYPE_VLAN"]
    MAX_VLANS, GRH_NEXT = c["MAX_VLAN_TAGS"], c["GRH_NEXT_BTH"]
    FL_SE, FL_M, FL_FECN, FL_BECN, FL_A = (c["FLAG_SE"], c["FLAG_M"], c["FLAG_FECN"],
                                           c["FLAG_BECN"], c["FLAG_A"])
    LT_ETH, LT_RAW, LT_SLL, LT_SLL2 = (c["LINKTYPE_ETHERNET"], c["LINKTYPE_RAW"],
                                       c["LINKTYPE_LINUX_SLL"], c["LINKTYPE_LINUX_SLL2"])
    L3K_NONE, L3K_GRH, L3K_IPV4, L3K_IPV6 = (c["L3_NONE"], c["L3_GRH"], c["L3_IPV4"],
                                             c["L3_IPV6"])
    L3K_LRH, L3K_LRH_GRH, LT_IB = c["L3_LRH"], c["L3_LRH_GRH"], c["WALK_INFINIBAND"]
    IB_LRH, IB_VL_MASK = c["LRH_SIZE"], cfg["lrh_vl_mask"]
    LK_ROCE, LK_IB = c["LINK_ROCE"], c["LINK_IB"]
    S_NR_LNH, H_LRH = st["NR_LNH"], hid["lrh"]
    if len(cfg["lrh"]) != NLRH:
        raise ValueError("fast path: LRH field table has %d entries, expected %d"
                         % (len(cfg["lrh"]), NLRH))
    for i, (off, n, shift, mask) in enumerate(cfg["lrh"]):
        L_OFF[i], L_N[i], L_SHIFT[i], L_MASK[i] = off, n, shift, mask
    for code in range(256):
        OP_VALID[code] = 0
        K_COUNT[code] = 0
    for code, (ext, payload_ok, fixed) in cfg["opcodes"].items():
        if len(ext) > MAXEXT:
            raise ValueError("opcode 0x%02x has more than %d extended headers" % (code, MAXEXT))
        OP_VALID[code] = cfg["opcode_links"][code]
        OP_NEXT[code] = len(ext)
        for j, (h, sz) in enumerate(ext):
            OP_HID[code][j] = h
            OP_HSZ[code][j] = sz
        OP_PAYLOAD[code] = 1 if payload_ok else 0
        OP_FIXED[code] = fixed
    for code, keys in cfg["keys"].items():
        K_COUNT[code] = len(keys)
        for j, (off, n, shift, mask) in enumerate(keys[:MAXKEY]):
            K_OFF[code][j], K_N[code][j], K_SHIFT[code][j], K_MASK[code][j] = off, n, shift, mask
    masks = cfg["masks"]
    _load_mask(masks["ip"], M_IP, 64)
    M_IP_LEN = len(masks["ip"])
    _load_mask(masks["ipv6"], M_IP6, 40)
    _load_mask(masks["grh"], M_GRH, 40)
    _load_mask(masks["udp"], M_UDP, 8)
    _load_mask(masks["bth"], M_BTH, 12)
    WalkType = cfg["walk_type"]
    configured = True


cdef _load_mask(bytes m, uint8_t *dst, int cap):
    cdef int i
    memset(dst, 0, cap)
    for i in range(min(len(m), cap)):
        dst[i] = m[i]


def crc32_impl():
    """Name of the CRC-32 kernel in use."""
    return roce_crc32_impl().decode()


def crc32_force(name):
    """Testing aid: force a CRC-32 kernel by name (None: automatic)."""
    if name is None:
        roce_crc32_force(NULL)
    else:
        b = name.encode()
        roce_crc32_force(b)


def crc32(data, unsigned int crc=0):
    """zlib.crc32 twin over any bytes-like object, using the fastest kernel."""
    cdef const unsigned char[::1] mv = data
    if mv.shape[0] == 0:
        return crc
    return roce_crc32(crc, &mv[0], mv.shape[0])


def ip_checksum(const unsigned char[::1] header):
    """Twin of roce.fast.ip_checksum_reference."""
    cdef Py_ssize_t i, n = header.shape[0]
    cdef uint64_t s = 0
    for i in range(0, n - 1, 2):
        s += (header[i] << 8) | header[i + 1]
    if n & 1:
        s += header[n - 1] << 8
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


cdef inline void wr(uint8_t *p, int base, int f, uint32_t value) noexcept nogil:
    """Write one field (read-modify-write of the bytes it spans)."""
    cdef uint8_t *q = p + base + F_OFF[f]
    cdef uint32_t v = 0
    cdef int i
    for i in range(F_N[f]):
        v = (v << 8) | q[i]
    v = (v & ~(F_MASK[f] << F_SHIFT[f])) | ((value & F_MASK[f]) << F_SHIFT[f])
    for i in range(F_N[f] - 1, -1, -1):
        q[i] = v & 0xFF
        v >>= 8


cpdef bint same_bytes(bytes a, Py_ssize_t a_at, bytes b, Py_ssize_t b_at,
                     Py_ssize_t n) except -1:
    """Twin of roce.fast.same_bytes_reference: whether ``a[a_at:a_at + n]`` equals
    ``b[b_at:b_at + n]``, compared in place (ValueError for a range outside either)."""
    if n < 0 or a_at < 0 or b_at < 0 or a_at > len(a) - n or b_at > len(b) - n:
        raise ValueError("same_bytes: a range outside its bytes")
    return memcmp(PyBytes_AS_STRING(a) + a_at, PyBytes_AS_STRING(b) + b_at, n) == 0


cpdef assemble(bytes l2, bytes l3, int l3_kind, bytes udp, bytes transport, icrc,
               bytes trailer, bint fix_l3_len, bint fix_checksum, bint fix_udp_len,
               bytes body=b"", Py_ssize_t body_at=0, Py_ssize_t body_len=-1):
    """Twin of roce.fast.assemble_reference: join the encoded headers (the transport part:
    ``transport`` then ``body[body_at:body_at + body_len]``, its payload, copied once; a
    negative ``body_len``: to the end), fill the L3 length, IPv4 header checksum and UDP
    length where asked, then append the ICRC (computed when ``icrc`` is None) and the
    trailer."""
    cdef Py_ssize_t n2 = len(l2), n3 = len(l3), nu = len(udp)
    if body_len < 0:
        body_len = len(body) - body_at
    if body_at < 0 or body_len < 0 or body_at > len(body) - body_len:
        raise ValueError("assemble: the payload's range lies outside its bytes")
    cdef Py_ssize_t nh = len(transport), nb = body_len, nt = nh + nb
    cdef Py_ssize_t nr = len(trailer)
    cdef Py_ssize_t icrc_off = n2 + n3 + nu + nt
    if nh < SZ_BTH:
        raise ValueError("assemble: transport part shorter than BTH")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, icrc_off + 4 + nr)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    cdef int l3_off = n2, bth_off = n2 + n3 + nu, i
    cdef uint32_t s
    memcpy(p, PyBytes_AS_STRING(l2), n2)
    memcpy(p + n2, PyBytes_AS_STRING(l3), n3)
    memcpy(p + n2 + n3, PyBytes_AS_STRING(udp), nu)
    memcpy(p + bth_off, PyBytes_AS_STRING(transport), nh)
    memcpy(p + bth_off + nh, PyBytes_AS_STRING(body) + body_at, nb)
    if fix_l3_len:
        if l3_kind == L3K_IPV4:
            wr(p, l3_off, F_IP_LEN, n3 + nu + nt + 4)
        elif l3_kind == L3K_IPV6:
            wr(p, l3_off, F_IP6_PLEN, nu + nt + 4)
        else:
            wr(p, l3_off, F_GRH_PAYLEN, nt + 4)
    if fix_udp_len and nu:
        wr(p, n2 + n3, F_UDP_LEN, nu + nt + 4)
    if fix_checksum and l3_kind == L3K_IPV4:
        wr(p, l3_off, F_IP_CHECKSUM, 0)
        s = 0
        for i in range(0, n3 - 1, 2):
            s += (p[l3_off + i] << 8) | p[l3_off + i + 1]
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        wr(p, l3_off, F_IP_CHECKSUM, (~s) & 0xFFFF)
    cdef uint32_t c
    if icrc is None:
        c = bswap32(icrc_raw(p, l3_off, l3_kind, n3, bth_off, icrc_off))
    else:
        c = icrc
    p[icrc_off] = c >> 24
    p[icrc_off + 1] = (c >> 16) & 0xFF
    p[icrc_off + 2] = (c >> 8) & 0xFF
    p[icrc_off + 3] = c & 0xFF
    memcpy(p + icrc_off + 4, PyBytes_AS_STRING(trailer), nr)
    return out


cpdef bth_pack(int opcode, bint se, int padcnt, int p_key, int destqp, bint ackreq, int psn):
    """Twin of roce.fast.bth_pack_reference: a BTH with TVer, M, FECN/BECN and reserved 0."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, SZ_BTH)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    memset(p, 0, SZ_BTH)
    wr(p, 0, F_BTH_OPCODE, opcode)
    wr(p, 0, F_BTH_SE, se)
    wr(p, 0, F_BTH_PADCNT, padcnt)
    wr(p, 0, F_BTH_PKEY, p_key)
    wr(p, 0, F_BTH_DESTQP, destqp)
    wr(p, 0, F_BTH_A, ackreq)
    wr(p, 0, F_BTH_PSN, psn)
    return out


def bth_unpack(bytes frame, int off):
    """Twin of roce.fast.bth_unpack_reference: (opcode, se, padcnt, p_key, destqp, a, psn)."""
    if off < 0 or off + SZ_BTH > PyBytes_GET_SIZE(frame):
        raise ValueError("bth_unpack: no BTH at that offset")
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(frame)
    return (rd(p, off, F_BTH_OPCODE), rd(p, off, F_BTH_SE) != 0, rd(p, off, F_BTH_PADCNT),
            rd(p, off, F_BTH_PKEY), rd(p, off, F_BTH_DESTQP), rd(p, off, F_BTH_A) != 0,
            rd(p, off, F_BTH_PSN))


cpdef rx(bytes frame, bint check_icrc=True, int linktype=1, int udp_port=4791):
    """Twin of roce.fast.rx_reference: (status, opcode, se, p_key, destqp, ackreq, psn,
    l3_kind, l3_off, l3_len, bth_off, payload_off, pad_off), one walk, one ICRC."""
    if frame is None:  # (what ``not None`` says of a def's argument; a cpdef takes none)
        raise TypeError("Argument 'frame' must not be None")
    cdef WalkResult w
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(frame)
    cdef int off
    if do_walk(p, PyBytes_GET_SIZE(frame), linktype, udp_port, &w) != S_OK:
        return (w.status, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    if check_icrc and bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off,
                                       w.icrc_off)) != stored(p, w.icrc_off):
        return (-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    off = w.bth_off
    return (S_OK, rd(p, off, F_BTH_OPCODE), rd(p, off, F_BTH_SE) != 0, rd(p, off, F_BTH_PKEY),
            rd(p, off, F_BTH_DESTQP), rd(p, off, F_BTH_A) != 0, rd(p, off, F_BTH_PSN),
            w.l3_kind, w.l3_off, w.l3_len, w.bth_off, w.payload_off, w.pad_off)


cdef inline void pcap_record_header(const uint8_t *q, bint big_endian, uint32_t *v) noexcept nogil:
    """A 16-byte pcap record header: seconds, fraction, caplen, origlen."""
    cdef int k
    for k in range(4):
        if big_endian:
            v[k] = (<uint32_t>q[4 * k] << 24) | (<uint32_t>q[4 * k + 1] << 16) | \
                (<uint32_t>q[4 * k + 2] << 8) | q[4 * k + 3]
        else:
            v[k] = (<uint32_t>q[4 * k + 3] << 24) | (<uint32_t>q[4 * k + 2] << 16) | \
                (<uint32_t>q[4 * k + 1] << 8) | q[4 * k]


def pcap_split(const uint8_t[::1] buf, Py_ssize_t pos, bint big_endian, long long frac_mul,
               Py_ssize_t max_records, list out, int64_t[::1] ts_ns, int64_t[::1] caplen,
               int64_t[::1] origlen, long long max_record, Py_ssize_t end=-1):
    """Cut complete pcap records from ``buf[pos:end]`` (``end`` -1: the whole buffer, which
    may be bytes or a memory map): append each frame's bytes to ``out`` and fill the
    columns.  Stops at an incomplete record, after ``max_records``, or before a record longer
    than ``max_record`` (status 1).  Returns (count, new pos, status); twin of
    roce.pcapio.pcap_split_reference."""
    cdef const uint8_t *p = &buf[0] if buf.shape[0] else NULL
    cdef Py_ssize_t n = buf.shape[0] if end < 0 or end > buf.shape[0] else end, count = 0
    if pos < 0:
        raise ValueError("pcap_split: negative position")
    cdef uint32_t v[4]
    cdef const uint8_t *q
    while count < max_records and n - pos >= 16:
        q = p + pos
        pcap_record_header(q, big_endian, v)
        if v[2] > max_record:
            return count, pos, 1
        if n - pos - 16 < v[2]:
            break
        out.append(PyBytes_FromStringAndSize(<const char *>(q + 16), v[2]))
        ts_ns[count] = <int64_t>v[0] * 1000000000 + <int64_t>v[1] * frac_mul
        caplen[count] = v[2]
        origlen[count] = v[3]
        count += 1
        pos += 16 + v[2]
    return count, pos, 0


# -- the walk -----------------------------------------------------------------------------------

# WalkResult is declared in _fastpath.pxd (other compiled modules cimport it)


cdef inline uint32_t rd(const uint8_t *p, int base, int f) noexcept nogil:
    cdef const uint8_t *q = p + base + F_OFF[f]
    cdef uint32_t v = 0
    cdef int i
    for i in range(F_N[f]):
        v = (v << 8) | q[i]
    return (v >> F_SHIFT[f]) & F_MASK[f]


cdef inline int fail(WalkResult *w, int status, int header, int offset, int a, int b) noexcept nogil:
    w.status = status
    w.err_header = header
    w.err_offset = offset
    w.err_a = a
    w.err_b = b
    return status


cdef int do_walk(const uint8_t *p, int n, int linktype, int udp_port, WalkResult *w) noexcept nogil:
    cdef int off = 0, etype, version, ihl, hlen, total, start, end, length, l2hdr, sz
    w.status = 0
    w.vlans = 0
    w.l3_kind = L3K_NONE
    w.l3_off = -1
    w.l3_len = 0
    w.udp_off = -1
    w.bth_off = -1
    w.opcode = -1
    w.payload_off = -1
    w.pad_off = -1
    w.icrc_off = -1
    w.l4_end = -1
    w.err_header = 0
    w.err_offset = 0
    w.err_a = 0
    w.err_b = 0
    if linktype == LT_RAW:
        if n < 1:
            return fail(w, S_TRUNC, H_IP, 0, 1, 0)
        version = p[0] >> 4
        if version == 4:
            etype = ET_IPV4
        elif version == 6:
            etype = ET_IPV6
        else:
            return fail(w, S_IP_VERSION, H_IP, 0, version, 0)
    else:
        if linktype == LT_ETH:
            l2hdr, sz, etype = H_ETH, SZ_ETH, F_ETH_TYPE
        elif linktype == LT_SLL:
            l2hdr, sz, etype = H_SLL, SZ_SLL, F_SLL_ETYPE
        elif linktype == LT_SLL2:
            l2hdr, sz, etype = H_SLL2, SZ_SLL2, F_SLL2_ETYPE
        elif linktype == LT_IB:  # last: plain RoCE never gets this far
            return do_lrh(p, n, w)
        else:
            return fail(w, S_NR_LINKTYPE, H_FRAME, 0, linktype, 0)
        if n < sz:
            return fail(w, S_TRUNC, l2hdr, 0, sz, n)
        etype = rd(p, 0, etype)
        off = sz
        while (etype == ET_VLAN0 or etype == ET_VLAN1 or etype == ET_VLAN2) and w.vlans < MAX_VLANS:
            if n - off < SZ_VLAN:
                return fail(w, S_TRUNC, H_VLAN, off, SZ_VLAN, n - off)
            etype = rd(p, off, F_VLAN_ETYPE)
            w.vlans += 1
            off += SZ_VLAN
    if etype == ET_IPV4:
        w.l3_kind = L3K_IPV4
        w.l3_off = off
        if n - off < SZ_IP:
            return fail(w, S_TRUNC, H_IP, off, SZ_IP, n - off)
        version = rd(p, off, F_IP_VERSION)
        if version != 4:
            return fail(w, S_IP_VERSION, H_IP, off, version, 0)
        ihl = rd(p, off, F_IP_IHL)
        if ihl < SZ_IP // 4:
            return fail(w, S_IP_HDRLEN, H_IP, off, ihl, 0)
        hlen = ihl * 4
        w.l3_len = hlen
        if n - off < hlen:
            return fail(w, S_TRUNC, H_IP, off, hlen, n - off)
        if rd(p, off, F_IP_PROTO) != 17:
            return fail(w, S_NR_PROTO, H_IP, off, rd(p, off, F_IP_PROTO), 0)
        if rd(p, off, F_IP_MF) or rd(p, off, F_IP_FRAG):
            return fail(w, S_NR_FRAGMENT, H_IP, off, 0, 0)
        total = rd(p, off, F_IP_LEN)
        if total < hlen + SZ_UDP:
            return fail(w, S_L3_LENGTH, H_IP, off, total, hlen + SZ_UDP)
        return do_udp(p, n, off + hlen, off + total, udp_port, H_IP, w)
    if etype == ET_IPV6:
        w.l3_kind = L3K_IPV6
        w.l3_off = off
        w.l3_len = SZ_IP6
        if n - off < SZ_IP6:
            return fail(w, S_TRUNC, H_IP6, off, SZ_IP6, n - off)
        version = rd(p, off, F_IP6_VERSION)
        if version != 6:
            return fail(w, S_IP_VERSION, H_IP6, off, version, 0)
        if rd(p, off, F_IP6_NXT) != 17:
            return fail(w, S_NR_PROTO, H_IP6, off, rd(p, off, F_IP6_NXT), 0)
        length = rd(p, off, F_IP6_PLEN)
        if length < SZ_UDP:
            return fail(w, S_L3_LENGTH, H_IP6, off, length, SZ_UDP)
        start = off + SZ_IP6
        return do_udp(p, n, start, start + length, udp_port, H_IP6, w)
    if etype == ET_ROCEV1:
        w.l3_kind = L3K_GRH
        w.l3_off = off
        w.l3_len = SZ_GRH
        if n - off < SZ_GRH:
            return fail(w, S_TRUNC, H_GRH, off, SZ_GRH, n - off)
        if rd(p, off, F_GRH_NXTHDR) != GRH_NEXT:
            return fail(w, S_GRH_NEXT, H_GRH, off, rd(p, off, F_GRH_NXTHDR), 0)
        start = off + SZ_GRH
        return do_transport(p, n, start, start + <int>rd(p, off, F_GRH_PAYLEN), H_GRH, w)
    return fail(w, S_NR_ETHERTYPE, H_ETH, off - 2 if off >= 2 else 0, etype, 0)


cdef inline uint32_t lrd(const uint8_t *p, int f) noexcept nogil:
    """One LRH field (index into L_*) of the packet at p."""
    cdef uint32_t v = 0
    cdef int i
    for i in range(L_N[f]):
        v = (v << 8) | p[L_OFF[f] + i]
    return (v >> L_SHIFT[f]) & L_MASK[f]


cdef int do_lrh(const uint8_t *p, int n, WalkResult *w) noexcept nogil:
    """Twin of roce.locate._lrh: a native InfiniBand packet (link type 247)."""
    cdef int lnh, end, off = IB_LRH, paylen
    w.l3_off = 0
    w.l3_len = IB_LRH
    if n < IB_LRH:
        return fail(w, S_TRUNC, H_LRH, 0, IB_LRH, n)
    lnh = lrd(p, 0)
    if lnh != L3K_LRH and lnh != L3K_LRH_GRH:
        return fail(w, S_NR_LNH, H_LRH, 0, lnh, 0)
    w.l3_kind = lnh
    end = <int>lrd(p, 1) * 4
    if lnh == L3K_LRH_GRH:
        w.l3_len = IB_LRH + SZ_GRH
        if n - off < SZ_GRH:
            return fail(w, S_TRUNC, H_GRH, off, SZ_GRH, n - off)
        if rd(p, off, F_GRH_NXTHDR) != GRH_NEXT:
            return fail(w, S_GRH_NEXT, H_GRH, off, rd(p, off, F_GRH_NXTHDR), 0)
        paylen = rd(p, off, F_GRH_PAYLEN)
        if paylen != end - off - SZ_GRH:
            return fail(w, S_L3_LENGTH, H_GRH, off, paylen, end - off - SZ_GRH)
        off += SZ_GRH
    if end < off + 4:
        return fail(w, S_L3_LENGTH, H_LRH, 0, end, off + 4)
    return do_transport(p, n, off, end, H_LRH, w)


cdef int do_udp(const uint8_t *p, int n, int off, int end, int udp_port, int l3hdr,
                WalkResult *w) noexcept nogil:
    w.udp_off = off
    if n - off < SZ_UDP:
        return fail(w, S_TRUNC, H_UDP, off, SZ_UDP, n - off)
    cdef int dport = rd(p, off, F_UDP_DPORT)
    if dport != udp_port:
        return fail(w, S_NR_PORT, H_UDP, off, dport, 0)
    cdef int length = rd(p, off, F_UDP_LEN)
    if length != end - off:
        return fail(w, S_UDP_LENGTH, H_UDP, off, length, end - off)
    return do_transport(p, n, off + SZ_UDP, end, l3hdr, w)


cdef int do_transport(const uint8_t *p, int n, int off, int end, int l3hdr,
                      WalkResult *w) noexcept nogil:
    cdef bint short = end > n
    cdef int limit = n if short else end - 4
    cdef int opcode, tver, padcnt, pos, j, sz, icrc, payload_len, left
    w.bth_off = off
    if limit - off < SZ_BTH:
        left = limit - off
        return fail(w, S_TRUNC, H_BTH, off, SZ_BTH, left if left > 0 else 0)
    opcode = rd(p, off, F_BTH_OPCODE)
    w.opcode = opcode
    tver = rd(p, off, F_BTH_TVER)
    if tver != 0:
        return fail(w, S_TVER, H_BTH, off + F_OFF[F_BTH_TVER], tver, 0)
    if not OP_VALID[opcode] & (LK_IB if l3hdr == H_LRH else LK_ROCE):
        return fail(w, S_OPCODE, H_BTH, off, opcode, 0)
    padcnt = rd(p, off, F_BTH_PADCNT)
    pos = off + SZ_BTH
    for j in range(OP_NEXT[opcode]):
        sz = OP_HSZ[opcode][j]
        if limit - pos < sz:
            left = limit - pos
            return fail(w, S_TRUNC, OP_HID[opcode][j], pos, sz, left if left > 0 else 0)
        pos += sz
    w.payload_off = pos
    if short:
        return fail(w, S_L3_LENGTH, l3hdr, w.l3_off, end - w.l3_off, n - w.l3_off)
    icrc = end - 4
    payload_len = icrc - pos - padcnt
    if payload_len < 0:
        return fail(w, S_PADCNT, H_BTH, off + F_OFF[F_BTH_PADCNT], padcnt, icrc - pos)
    w.pad_off = pos + payload_len
    w.icrc_off = icrc
    w.l4_end = end
    if not OP_PAYLOAD[opcode] and payload_len + padcnt:
        return fail(w, S_PAYLOAD, H_PAYLOAD, pos, payload_len + padcnt, 0)
    if OP_FIXED[opcode] >= 0 and payload_len != OP_FIXED[opcode]:
        return fail(w, S_PAYLOAD_LEN, H_PAYLOAD, pos, payload_len, OP_FIXED[opcode])
    return S_OK


cdef object walk_tuple(WalkResult *w):
    return tuple.__new__(WalkType, (w.status, w.vlans, w.l3_kind, w.l3_off, w.l3_len,
                                    w.udp_off, w.bth_off, w.opcode, w.payload_off, w.pad_off,
                                    w.icrc_off, w.l4_end, w.err_header, w.err_offset,
                                    w.err_a, w.err_b))


def walk(bytes frame, int linktype=1, int udp_port=4791):
    """Twin of roce.locate.walk."""
    cdef WalkResult w
    do_walk(<const uint8_t *>PyBytes_AS_STRING(frame), PyBytes_GET_SIZE(frame), linktype,
            udp_port, &w)
    return walk_tuple(&w)


# -- header decoding into dicts ----------------------------------------------------------------

cdef extern from "arpa/inet.h":
    const char *inet_ntop(int af, const void *src, char *dst, int size)

cdef extern from "sys/socket.h":
    int AF_INET
    int AF_INET6

DEF MAXH = 32
DEF MAXF = 16
cdef enum:
    K_INT = 0
    K_BOOL = 1
    K_MAC = 2
    K_IP4 = 3
    K_IP6 = 4
    K_BIG = 5

cdef int D_OFF[MAXH][MAXF]
cdef int D_N[MAXH][MAXF]
cdef int D_SHIFT[MAXH][MAXF]
cdef int D_KIND[MAXH][MAXF]
cdef uint64_t D_MASK[MAXH][MAXF]
cdef int D_NF[MAXH]
cdef list D_NAMES = []   # hid -> tuple of field names
cdef list D_BIGMASK = []  # hid -> tuple of Python masks (for fields wider than 64 bits)
cdef list H_NAMES = []   # hid -> header name
cdef object VLAN2_NAME = "vlan2"
cdef object OPTIONS_NAME = "options"


def configure_decoder(list headers, str vlan2_name):
    """Per header id: (name, [(field, byte offset, bytes, shift, mask, kind)]); kinds are
    0 int, 1 bool, 2 MAC, 3 IPv4, 4 IPv6, 5 integer wider than 64 bits."""
    global D_NAMES, H_NAMES, VLAN2_NAME, D_BIGMASK
    cdef int hid, j
    if len(headers) > MAXH:
        raise ValueError("too many headers for the decoder")
    D_NAMES = []
    H_NAMES = []
    D_BIGMASK = []
    for hid, (hname, fields) in enumerate(headers):
        if len(fields) > MAXF:
            raise ValueError("header %s has too many fields" % hname)
        H_NAMES.append(hname)
        D_NAMES.append(tuple(f[0] for f in fields))
        D_BIGMASK.append(tuple(f[4] for f in fields))
        D_NF[hid] = len(fields)
        for j, (fname, off, n, shift, mask, kind) in enumerate(fields):
            if kind != K_BIG and kind != K_IP6 and n > 8:
                raise ValueError("%s.%s: %d bytes need kind 5" % (hname, fname, n))
            D_OFF[hid][j], D_N[hid][j], D_SHIFT[hid][j] = off, n, shift
            D_MASK[hid][j] = mask if kind != K_BIG else 0
            D_KIND[hid][j] = kind
    VLAN2_NAME = vlan2_name


cdef const char *HEX = b"0123456789abcdef"


cdef object decode_one(bytes frame, const uint8_t *p, int hid, int base):
    cdef dict d = {}
    cdef tuple names = <tuple>D_NAMES[hid]
    cdef int j, kind, k
    cdef uint64_t v
    cdef char buf[64]
    cdef const uint8_t *q
    cdef object value
    for j in range(D_NF[hid]):
        kind = D_KIND[hid][j]
        q = p + base + D_OFF[hid][j]
        if kind == K_INT:
            v = (rd64(q, D_N[hid][j]) >> D_SHIFT[hid][j]) & D_MASK[hid][j]
            value = PyLong_FromUnsignedLongLong(v)
        elif kind == K_BOOL:
            value = ((rd64(q, D_N[hid][j]) >> D_SHIFT[hid][j]) & D_MASK[hid][j]) != 0
        elif kind == K_MAC:
            for k in range(6):
                buf[k * 3] = HEX[q[k] >> 4]
                buf[k * 3 + 1] = HEX[q[k] & 0xF]
                buf[k * 3 + 2] = 58  # ':'
            value = PyUnicode_DecodeASCII(buf, 17, NULL)
        elif kind == K_IP4:
            inet_ntop(AF_INET, q, buf, 64)
            value = PyUnicode_DecodeASCII(buf, strlen(buf), NULL)
        elif kind == K_IP6:
            inet_ntop(AF_INET6, q, buf, 64)
            value = PyUnicode_DecodeASCII(buf, strlen(buf), NULL)
        else:
            value = (int.from_bytes(frame[base + D_OFF[hid][j]:base + D_OFF[hid][j] + D_N[hid][j]],
                                    "big") >> D_SHIFT[hid][j]) & (<tuple>D_BIGMASK[hid])[j]
        PyDict_SetItem(d, names[j], value)
    return d


def decode_headers(bytes frame, object w, int linktype):
    """Twin of roce.packet.decode_headers_reference: every header of a walked frame."""
    cdef dict out = {}
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(frame)
    cdef int off = 0, i, l2, l3, op, pos
    cdef int vlans = w[1], l3_kind = w[2], l3_off = w[3], l3_len = w[4], udp_off = w[5]
    cdef int bth_off = w[6]
    if bth_off < 0 or bth_off + SZ_BTH > PyBytes_GET_SIZE(frame):
        raise ValueError("decode_headers: frame was not walked to BTH")
    if linktype == LT_ETH or linktype == LT_SLL or linktype == LT_SLL2:
        l2 = H_ETH if linktype == LT_ETH else H_SLL if linktype == LT_SLL else H_SLL2
        out[H_NAMES[l2]] = decode_one(frame, p, l2, 0)
        off = SZ_ETH if linktype == LT_ETH else SZ_SLL if linktype == LT_SLL else SZ_SLL2
        for i in range(vlans):
            out[H_NAMES[H_VLAN] if i == 0 else VLAN2_NAME] = decode_one(frame, p, H_VLAN, off)
            off += SZ_VLAN
    l3 = H_IP if l3_kind == L3K_IPV4 else H_IP6 if l3_kind == L3K_IPV6 else H_GRH
    hdr = decode_one(frame, p, l3, l3_off)
    if l3_kind == L3K_IPV4 and l3_len > SZ_IP:
        hdr[OPTIONS_NAME] = frame[l3_off + SZ_IP:l3_off + l3_len]
    out[H_NAMES[l3]] = hdr
    if udp_off >= 0:
        out[H_NAMES[H_UDP]] = decode_one(frame, p, H_UDP, udp_off)
    out[H_NAMES[H_BTH]] = decode_one(frame, p, H_BTH, bth_off)
    op = rd(p, bth_off, F_BTH_OPCODE)
    pos = bth_off + SZ_BTH
    if OP_VALID[op]:
        for i in range(OP_NEXT[op]):
            if pos + OP_HSZ[op][i] > PyBytes_GET_SIZE(frame):
                break
            out[H_NAMES[OP_HID[op][i]]] = decode_one(frame, p, OP_HID[op][i], pos)
            pos += OP_HSZ[op][i]
    return out


# -- ICRC -----------------------------------------------------------------------------------

cdef uint32_t icrc_raw(const uint8_t *p, int l3_off, int l3_kind, int l3_len, int bth_off,
                       int end) noexcept nogil:
    """CRC-32 over the masked pseudo header and the rest; the value as stored little-endian."""
    cdef uint8_t buf[8 + 60 + 8 + 12]
    cdef int i, k = 8, udp_len
    cdef const uint8_t *mask
    cdef int mlen
    if l3_kind == L3K_LRH or l3_kind == L3K_LRH_GRH:  # native InfiniBand (roce.icrc)
        return ib_icrc_raw(p + l3_off, l3_kind == L3K_LRH_GRH, bth_off - l3_off,
                           end - l3_off)
    memset(buf, 0xFF, 8)
    if l3_kind == L3K_IPV4:
        mask, mlen = M_IP, M_IP_LEN
    elif l3_kind == L3K_IPV6:
        mask, mlen = M_IP6, 40
    else:
        mask, mlen = M_GRH, 40
    if l3_len > 60:
        l3_len = 60
    memcpy(buf + k, p + l3_off, l3_len)
    for i in range(mlen if mlen < l3_len else l3_len):
        buf[k + i] |= mask[i]
    k += l3_len
    udp_len = bth_off - (l3_off + l3_len)
    if udp_len > 0:
        memcpy(buf + k, p + l3_off + l3_len, SZ_UDP)
        for i in range(SZ_UDP):
            buf[k + i] |= M_UDP[i]
        k += SZ_UDP
    memcpy(buf + k, p + bth_off, SZ_BTH)
    for i in range(SZ_BTH):
        buf[k + i] |= M_BTH[i]
    k += SZ_BTH
    cdef uint32_t crc = roce_crc32(0, buf, k)
    if end > bth_off + SZ_BTH:
        crc = roce_crc32(crc, p + bth_off + SZ_BTH, end - bth_off - SZ_BTH)
    return crc


cdef inline uint32_t bswap32(uint32_t x) noexcept nogil:
    return ((x & 0xFF) << 24) | ((x & 0xFF00) << 8) | ((x >> 8) & 0xFF00) | (x >> 24)


cdef inline uint32_t stored(const uint8_t *p, int off) noexcept nogil:
    return (<uint32_t>p[off] << 24) | (<uint32_t>p[off + 1] << 16) | (<uint32_t>p[off + 2] << 8) | p[off + 3]


def icrc_at(bytes frame, int l3_offset, int l3_kind, int l3_len, int bth_offset, int end):
    """Twin of roce.icrc.icrc_at (Wireshark's big-endian reading of the trailer)."""
    if l3_offset < 0 or bth_offset < l3_offset or end < bth_offset + 12 or end > len(frame):
        raise ValueError("icrc_at: offsets outside the frame")
    return bswap32(icrc_raw(<const uint8_t *>PyBytes_AS_STRING(frame), l3_offset, l3_kind,
                            l3_len, bth_offset, end))


def icrc(bytes frame, int linktype=1, int udp_port=4791):
    """(status, computed ICRC, stored ICRC) for one frame; status as in roce.locate."""
    cdef WalkResult w
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(frame)
    if do_walk(p, PyBytes_GET_SIZE(frame), linktype, udp_port, &w) != S_OK:
        return (w.status, 0, 0)
    return (S_OK, bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)),
            stored(p, w.icrc_off))


cdef void icrc_one(const uint8_t *p, Py_ssize_t n, int linktype, int udp_port,
                   uint32_t *crc, uint8_t *status, uint8_t *good) noexcept nogil:
    cdef WalkResult w
    crc[0] = 0
    good[0] = 0
    if do_walk(p, n, linktype, udp_port, &w) == S_OK:
        crc[0] = bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off))
        good[0] = crc[0] == stored(p, w.icrc_off)
    status[0] = w.status


DEF PARALLEL_MIN = 512  # below this a second thread costs more than it saves
cdef bint parallel_allowed = True


def disable_parallel():
    """Called in a forked child: GNU OpenMP's thread pool does not survive fork(), so a
    child never enters a parallel region (it would hang); its batches run on one core."""
    global parallel_allowed
    parallel_allowed = False


def icrc_batch(list frames, int linktype=1, int udp_port=4791, uint32_t[::1] out=None,
               uint8_t[::1] status=None):
    """Compute the ICRC of every frame.  Fills ``out`` (computed ICRC, 0 if not RoCE) and
    ``status`` (walk status); returns the number of RoCE frames whose stored ICRC is right.
    Large batches are split over the CPU's cores (OpenMP, when the build has it)."""
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef object f
    cdef Py_ssize_t good = 0
    cdef int threads = 1
    if out is not None and out.shape[0] < count:
        raise ValueError("icrc_batch: out is shorter than frames")
    if status is not None and status.shape[0] < count:
        raise ValueError("icrc_batch: status is shorter than frames")
    if count == 0:
        return 0
    cdef const uint8_t **ptrs = <const uint8_t **>malloc(count * sizeof(uint8_t *))
    cdef Py_ssize_t *lens = <Py_ssize_t *>malloc(count * sizeof(Py_ssize_t))
    cdef uint32_t *crcs = <uint32_t *>malloc(count * sizeof(uint32_t))
    cdef uint8_t *sts = <uint8_t *>malloc(count)
    cdef uint8_t *oks = <uint8_t *>malloc(count)
    try:
        if not ptrs or not lens or not crcs or not sts or not oks:
            raise MemoryError()
        for i in range(count):
            f = <object>PyList_GET_ITEM(frames, i)
            if not PyBytes_Check(f):
                raise TypeError("icrc_batch: frame %d is not bytes" % i)
            ptrs[i] = <const uint8_t *>PyBytes_AS_STRING(f)
            lens[i] = PyBytes_GET_SIZE(f)
        if count >= PARALLEL_MIN and parallel_allowed:
            threads = omp_threads()
        with nogil:
            if threads > 1:
                for i in prange(count, num_threads=threads, schedule="static"):
                    icrc_one(ptrs[i], lens[i], linktype, udp_port, &crcs[i], &sts[i], &oks[i])
            else:  # no OpenMP region at all: safe after fork(), cheaper for small batches
                for i in range(count):
                    icrc_one(ptrs[i], lens[i], linktype, udp_port, &crcs[i], &sts[i], &oks[i])
        for i in range(count):
            good += oks[i]
            if out is not None:
                out[i] = crcs[i]
            if status is not None:
                status[i] = sts[i]
        return good
    finally:
        free(ptrs)
        free(lens)
        free(crcs)
        free(sts)
        free(oks)


# -- bulk header scan -------------------------------------------------------------------------

cdef inline uint64_t rd64(const uint8_t *q, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | q[i]
    return v


def scan(list frames, int linktype=1, int udp_port=4791, bint check_icrc=False, dict cols=None):
    """Walk every frame and write BTH and first-ETH fields into preallocated columns.

    ``cols`` maps column name -> writable array of at least len(frames) items (see
    roce.fast.scan for the names and types).  No Python object is made per frame.
    """
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef WalkResult w
    cdef const uint8_t *p
    cdef const uint8_t *b
    cdef object f
    cdef int j, op, ecn
    cdef uint8_t[::1] c_status = cols["status"]
    cdef uint8_t[::1] c_opcode = cols["opcode"]
    cdef uint32_t[::1] c_destqp = cols["destqp"]
    cdef uint32_t[::1] c_psn = cols["psn"]
    cdef uint8_t[::1] c_flags = cols["flags"]
    cdef uint16_t[::1] c_pkey = cols["p_key"]
    cdef uint8_t[::1] c_ecn = cols["ecn"]
    cdef uint8_t[::1] c_l3 = cols["l3_kind"]
    cdef int32_t[::1] c_l3off = cols["l3_off"]
    cdef int32_t[::1] c_bthoff = cols["bth_off"]
    cdef int32_t[::1] c_paylen = cols["payload_len"]
    cdef uint64_t[::1] c_k0 = cols["key0"]
    cdef uint64_t[::1] c_k1 = cols["key1"]
    cdef uint64_t[::1] c_k2 = cols["key2"]
    cdef uint8_t[::1] c_icrc = cols["icrc_ok"]
    cdef uint64_t kv[MAXKEY]
    for i in range(count):
        f = <object>PyList_GET_ITEM(frames, i)
        if not PyBytes_Check(f):
            raise TypeError("scan: frame %d is not bytes" % i)
        p = <const uint8_t *>PyBytes_AS_STRING(f)
        do_walk(p, PyBytes_GET_SIZE(f), linktype, udp_port, &w)
        c_status[i] = w.status
        c_l3[i] = w.l3_kind
        c_l3off[i] = w.l3_off
        c_bthoff[i] = w.bth_off
        kv[0] = kv[1] = kv[2] = 0
        if w.status != S_OK:
            c_opcode[i] = w.opcode if w.opcode >= 0 else 0
            c_destqp[i] = c_psn[i] = c_flags[i] = c_pkey[i] = c_ecn[i] = 0
            c_paylen[i] = -1
            c_icrc[i] = 0
        else:
            b = p + w.bth_off
            op = w.opcode
            c_opcode[i] = op
            c_flags[i] = ((FL_SE if rd(p, w.bth_off, F_BTH_SE) else 0)
                          | (FL_M if rd(p, w.bth_off, F_BTH_M) else 0)
                          | (FL_FECN if rd(p, w.bth_off, F_BTH_FECN) else 0)
                          | (FL_BECN if rd(p, w.bth_off, F_BTH_BECN) else 0)
                          | (FL_A if rd(p, w.bth_off, F_BTH_A) else 0))
            c_pkey[i] = rd(p, w.bth_off, F_BTH_PKEY)
            c_destqp[i] = rd(p, w.bth_off, F_BTH_DESTQP)
            c_psn[i] = rd(p, w.bth_off, F_BTH_PSN)
            if w.l3_kind == L3K_IPV4:
                ecn = rd(p, w.l3_off, F_IP_ECN)
            elif w.l3_kind == L3K_IPV6:
                ecn = rd(p, w.l3_off, F_IP6_TCLASS) & 3
            else:
                ecn = 0
            c_ecn[i] = ecn
            c_paylen[i] = w.pad_off - w.payload_off
            for j in range(K_COUNT[op]):
                kv[j] = (rd64(b + K_OFF[op][j], K_N[op][j]) >> K_SHIFT[op][j]) & K_MASK[op][j]
            if check_icrc:
                c_icrc[i] = bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off,
                                             w.icrc_off)) == stored(p, w.icrc_off)
            else:
                c_icrc[i] = 0
        c_k0[i] = kv[0]
        c_k1[i] = kv[1]
        c_k2[i] = kv[2]
    return count


# -- PSN --------------------------------------------------------------------------------------

DEF PSN_MASK = 0xFFFFFF


cdef inline int32_t c_psn_diff(uint32_t a, uint32_t b) noexcept nogil:
    return (<int32_t>(((a - b) << 8) & 0xFFFFFFFFu)) >> 8


def psn_add(uint32_t psn, int64_t n):
    return <uint32_t>((<int64_t>psn + n) & PSN_MASK)


def psn_diff(uint32_t a, uint32_t b):
    return c_psn_diff(a, b)


def psn_cmp(uint32_t a, uint32_t b):
    cdef int32_t d = c_psn_diff(a, b)
    return (d > 0) - (d < 0)


def classify(uint32_t psn, uint32_t epsn):
    cdef int32_t d = c_psn_diff(psn, epsn)
    if d == 0:
        return 0
    return 2 if d > 0 else 1


DEF MAX_HOLES = 1024

# roce.psn.EARLY_WINDOW, set by configure_psn (roce.fast, at import): 0 until then
cdef uint32_t T_EARLY_WINDOW = 0


def configure_psn(uint32_t early_window):
    """The PSN tracker's constants from roce.psn (one source of truth)."""
    global T_EARLY_WINDOW
    T_EARLY_WINDOW = early_window


cdef class PSNTracker:
    """Twin of roce.psn.PSNTracker (its C attributes are declared in _fastpath.pxd)."""

    def __cinit__(self):
        self.next = self.first = 0
        self.early = T_EARLY_WINDOW
        self.started = False
        self.in_order = self.gaps = self.missing = self.late = self.duplicates = self.wraps = 0
        self.nholes = 0
        self.cap = 0
        self.hole_start = NULL
        self.hole_len = NULL

    def __dealloc__(self):
        free(self.hole_start)
        free(self.hole_len)

    cdef int _reserve(self) except -1:
        # holes grow on demand: most flows never have more than a few
        cdef int cap
        cdef uint32_t *a
        cdef uint32_t *b
        if self.nholes + 1 < self.cap:
            return 0
        cap = self.cap * 2 if self.cap else 8
        if cap > MAX_HOLES + 2:
            cap = MAX_HOLES + 2
        a = <uint32_t *>realloc(self.hole_start, cap * sizeof(uint32_t))
        if a == NULL:
            raise MemoryError()
        self.hole_start = a
        b = <uint32_t *>realloc(self.hole_len, cap * sizeof(uint32_t))
        if b == NULL:
            raise MemoryError()
        self.hole_len = b
        self.cap = cap
        return 0

    def skip_to(self, uint32_t psn):
        """Continue from ``psn`` without counting a gap."""
        self.started = True
        self.next = psn & PSN_MASK
        self.early = 0

    cpdef int feed(self, uint32_t psn, int count=1):
        psn &= PSN_MASK
        if count < 1:
            count = 1
        if not self.started:
            self.started = True
            self.first = psn
            self.in_order += 1
            self._advance(psn, count)
            return 0
        cdef int32_t d = c_psn_diff(psn, self.next)
        if d == 0:
            self.in_order += 1
            self._advance(psn, count)
            return 1
        if d > 0:
            self.gaps += 1
            self.missing += d
            self._reserve()
            self.hole_start[self.nholes] = self.next
            self.hole_len[self.nholes] = d
            self.nholes += 1
            if self.nholes > MAX_HOLES:
                self._drop(0)
            self._advance(psn, count)
            return 2
        if self._fill(psn) or (self.early and self._early(psn, count)):
            self.late += 1
            return 3
        self.duplicates += 1
        return 4

    cdef bint _early(self, uint32_t psn, int count) except -1:
        """roce.psn.PSNTracker._early: a late first arrival moves the start back."""
        cdef int32_t below = c_psn_diff(self.first, psn)
        if below < count or <uint32_t>below > self.early \
                or c_psn_diff(self.next, self.first) < 0:
            return False
        self._back(psn, (psn + count) & PSN_MASK, <uint32_t>(below - count))
        return True

    cpdef bint start_at(self, uint32_t psn) except -1:
        """roce.psn.PSNTracker.start_at."""
        psn &= PSN_MASK
        cdef int32_t below = c_psn_diff(self.first, psn)
        if not self.started or below <= 0 or <uint32_t>below > self.early \
                or c_psn_diff(self.next, self.first) < 0:
            return False
        self._back(psn, psn, <uint32_t>below)
        return True

    cdef int _back(self, uint32_t psn, uint32_t start, uint32_t hole) except -1:
        cdef int k
        if hole:
            self._reserve()
            for k in range(self.nholes, 0, -1):
                self.hole_start[k] = self.hole_start[k - 1]
                self.hole_len[k] = self.hole_len[k - 1]
            self.hole_start[0] = start
            self.hole_len[0] = hole
            self.nholes += 1
            self.missing += hole
            if self.nholes > MAX_HOLES:
                self._drop(0)
        self.first = psn
        return 0

    cdef void _advance(self, uint32_t psn, int count) noexcept:
        cdef uint64_t nxt = <uint64_t>psn + count
        if psn < self.next or nxt > PSN_MASK:
            self.wraps += 1
        self.next = nxt & PSN_MASK

    cdef void _drop(self, int i) noexcept:
        cdef int k
        for k in range(i, self.nholes - 1):
            self.hole_start[k] = self.hole_start[k + 1]
            self.hole_len[k] = self.hole_len[k + 1]
        self.nholes -= 1

    cdef bint _fill(self, uint32_t psn) except -1:
        cdef int i, k
        cdef uint32_t start, length
        cdef int32_t off
        for i in range(self.nholes):
            start = self.hole_start[i]
            length = self.hole_len[i]
            off = c_psn_diff(psn, start)
            if off >= 0 and <uint32_t>off < length:
                if length == 1:
                    self._drop(i)
                elif off == 0:
                    self.hole_start[i] = (start + 1) & PSN_MASK
                    self.hole_len[i] = length - 1
                elif <uint32_t>off == length - 1:
                    self.hole_len[i] = length - 1
                else:
                    self._reserve()
                    self.hole_len[i] = off
                    for k in range(self.nholes, i + 1, -1):
                        self.hole_start[k] = self.hole_start[k - 1]
                        self.hole_len[k] = self.hole_len[k - 1]
                    self.hole_start[i + 1] = (psn + 1) & PSN_MASK
                    self.hole_len[i + 1] = length - off - 1
                    self.nholes += 1
                    if self.nholes > MAX_HOLES:
                        self._drop(0)
                return True
        return False

    cpdef bint missing_below(self, uint32_t psn, int64_t floor=-1):
        """roce.psn.PSNTracker.missing_below."""
        cdef int i
        for i in range(self.nholes - 1, -1, -1):
            if c_psn_diff(self.hole_start[i], psn) < 0:
                return floor < 0 or c_psn_diff(
                    (self.hole_start[i] + self.hole_len[i] - 1) & PSN_MASK,
                    <uint32_t>floor) >= 0
        return False

    def feed_many(self, const uint32_t[::1] psns, const uint32_t[::1] counts=None):
        """Feed a column of PSNs; returns nothing (read the counters)."""
        cdef Py_ssize_t i
        for i in range(psns.shape[0]):
            self.feed(psns[i], counts[i] if counts is not None else 1)

    @property
    def holes(self):
        return [[self.hole_start[i], self.hole_len[i]] for i in range(self.nholes)]

    @property
    def still_missing(self):
        cdef long s = 0
        cdef int i
        for i in range(self.nholes):
            s += self.hole_len[i]
        return s

    def counts(self):
        return {"in_order": self.in_order, "gaps": self.gaps, "missing": self.missing,
                "late": self.late, "duplicates": self.duplicates, "wraps": self.wraps,
                "still_missing": self.still_missing, "next": self.next}


include "decoder/_columns.pxi"

# -- native InfiniBand (roce.families) ---------------------------------------------------------

include "families/ib/_scan.pxi"
include "families/ib/_lines.pxi"
include "families/base/_lines.pxi"  # RoCE's one-line text: ib/_lines.pxi's writers
include "families/uet/_lines.pxi"
include "emu/uet/_receive.pxi"  # the emulator's UET reading: _lines.pxi's walk
include "emu/uet/_frame.pxi"  # the emulator's UET frames, by uetcodec's plans
include "families/_peel.pxi"
include "emu/net/_routed.pxi"
include "emu/net/_serial.pxi"  # a wire's serialization clock: serial.serial_end_reference's twin
include "_headercodec.pxi"  # roce.headers' codecs of integer fields, in C
include "emu/net/_events.pxi"
include "emu/core/_pattern.pxi"  # the seeded payload pattern: payload.expand_reference's twin
