# Tunnels peeled in C for the one-line path and `roce stats`: GRE, ERSPAN II/III, VXLAN.
# Twin: roce.decoder.familylines.peel_reference (hypothesis test in tests/test_families.py).
# Which IP protocols, UDP ports and GRE protocols lead to which tunnel comes from the
# registry's rows (roce.decoder.familylines hands them over before each batch); header sizes and
# protocol numbers from roce.families.tunnels.

DEF MAXROWS = 32

cdef enum:
    TK_NONE = 0
    TK_GRE = 1
    TK_ERSPAN2 = 2
    TK_ERSPAN3 = 3
    TK_VXLAN = 4

cdef int PR_N = 0, PT_N = 0, GR_N = 0
cdef int PR_VAL[MAXROWS]
cdef int PR_KIND[MAXROWS]
cdef int PT_VAL[MAXROWS]
cdef int PT_KIND[MAXROWS]
cdef int GR_VAL[MAXROWS]
cdef int GR_KIND[MAXROWS]
cdef int SZ_ERSPAN2 = 8, SZ_ERSPAN3 = 12, SZ_PLATFORM = 8, SZ_VXLAN = 8
cdef int GRE_TEB = 0x6558, GRE_ER2 = 0x88BE, GRE_IP4 = 0x0800, GRE_IP6 = 0x86DD
cdef int LT_OUT_ETH = 1, LT_OUT_RAW = 101

PEEL_KINDS = {"gre": TK_GRE, "erspan2": TK_ERSPAN2, "erspan3": TK_ERSPAN3, "vxlan": TK_VXLAN}


def peel_configure(dict cfg):
    """Rows (value -> tunnel kind name) per table and the tunnel constants."""
    global PR_N, PT_N, GR_N, SZ_ERSPAN2, SZ_ERSPAN3, SZ_PLATFORM, SZ_VXLAN
    global GRE_TEB, GRE_ER2, GRE_IP4, GRE_IP6, LT_OUT_ETH, LT_OUT_RAW
    cdef int i
    PR_N = min(len(cfg["ip.proto"]), MAXROWS)
    PT_N = min(len(cfg["udp.port"]), MAXROWS)
    GR_N = min(len(cfg["gre.proto"]), MAXROWS)
    for i, (v, k) in enumerate(sorted(cfg["ip.proto"].items())[:MAXROWS]):
        PR_VAL[i], PR_KIND[i] = v, PEEL_KINDS[k]
    for i, (v, k) in enumerate(sorted(cfg["udp.port"].items())[:MAXROWS]):
        PT_VAL[i], PT_KIND[i] = v, PEEL_KINDS[k]
    for i, (v, k) in enumerate(sorted(cfg["gre.proto"].items())[:MAXROWS]):
        GR_VAL[i], GR_KIND[i] = v, PEEL_KINDS[k]
    c = cfg["const"]
    SZ_ERSPAN2, SZ_ERSPAN3, SZ_PLATFORM, SZ_VXLAN = (c["erspan2"], c["erspan3"],
                                                     c["platform"], c["vxlan"])
    GRE_TEB, GRE_ER2, GRE_IP4, GRE_IP6 = c["teb"], c["erspan2_proto"], c["ipv4"], c["ipv6"]
    LT_OUT_ETH, LT_OUT_RAW = c["lt_eth"], c["lt_raw"]


cdef inline int kind_of(int *vals, int *kinds, int n, int v) noexcept nogil:
    cdef int i
    for i in range(n):
        if vals[i] == v:
            return kinds[i]
    return TK_NONE


cdef int peel_one(const uint8_t *p, int n, int kind, int off, int *lt) noexcept nogil:
    """Offset of the inner frame (its link type in lt), or -1 to leave the frame alone."""
    cdef int flags, proto, steps = 0
    while steps < 8:
        steps += 1
        if kind == TK_GRE:
            if n - off < 4 or p[off + 1] & 7:
                return -1
            flags = p[off]
            proto = (p[off + 2] << 8) | p[off + 3]
            off += 4 + (4 if flags & 0x80 else 0) + (4 if flags & 0x20 else 0) + (
                4 if flags & 0x10 else 0)
            if proto == GRE_TEB or (proto == GRE_ER2 and not flags & 0x10):
                lt[0] = LT_OUT_ETH
                return off
            if proto == GRE_IP4 or proto == GRE_IP6:
                lt[0] = LT_OUT_RAW
                return off
            kind = kind_of(GR_VAL, GR_KIND, GR_N, proto)
        elif kind == TK_ERSPAN2:
            if n - off < SZ_ERSPAN2 or p[off] >> 4 != 1:
                return -1
            lt[0] = LT_OUT_ETH
            return off + SZ_ERSPAN2
        elif kind == TK_ERSPAN3:
            if n - off < SZ_ERSPAN3 or p[off] >> 4 != 2:
                return -1
            lt[0] = LT_OUT_ETH
            return off + SZ_ERSPAN3 + (SZ_PLATFORM if p[off + SZ_ERSPAN3 - 1] & 1 else 0)
        elif kind == TK_VXLAN:
            if n - off < SZ_VXLAN:
                return -1
            lt[0] = LT_OUT_ETH
            return off + SZ_VXLAN
        else:
            return -1
    return -1


def peel(list frames, int linktype, int udp_port):
    """Twin of roce.decoder.familylines.peel_reference: the frames with tunnels replaced by the
    frame inside (same link type only); other frames are the same objects."""
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef WalkResult w
    cdef const uint8_t *p
    cdef int n, kind, off, lt
    cdef object f
    cdef list out = list(frames)
    for i in range(count):
        f = <object>PyList_GET_ITEM(frames, i)
        if not PyBytes_Check(f):
            raise TypeError("peel: frame %d is not bytes" % i)
        p = <const uint8_t *>PyBytes_AS_STRING(f)
        n = PyBytes_GET_SIZE(f)
        do_walk(p, n, linktype, udp_port, &w)
        if w.status == S_NR_PROTO:
            kind = kind_of(PR_VAL, PR_KIND, PR_N, w.err_a)
            off = w.l3_off + w.l3_len
        elif w.status == S_NR_PORT:
            kind = kind_of(PT_VAL, PT_KIND, PT_N, w.err_a)
            off = w.udp_off + SZ_UDP
        else:
            continue
        if kind == TK_NONE:
            continue
        lt = -1
        off = peel_one(p, n, kind, off, &lt)
        if off >= 0 and lt == linktype:
            out[i] = PyBytes_FromStringAndSize(<const char *>p + off, n - off)
    return out


# -- ERF records (roce.families.erf): the payload of every record of a batch -----------------

cdef int ERF_HDR = 16, ERF_EXTSZ = 8, ERF_EXT_BIT = 0x80, ERF_TYPE_AT = 8, ERF_RLEN_AT = 10
cdef int ERF_T_ETH = 2, ERF_PAD_ETH = 2
cdef int ERF_INNER[128]  # by record type: the link type of what it holds, -1 none


def erf_configure(dict cfg):
    """The ERF header's sizes and offsets and the record types' inner link types
    (roce.families.erf)."""
    global ERF_HDR, ERF_EXTSZ, ERF_EXT_BIT, ERF_TYPE_AT, ERF_RLEN_AT, ERF_T_ETH, ERF_PAD_ETH
    cdef int t
    ERF_HDR, ERF_EXTSZ, ERF_EXT_BIT = cfg["header"], cfg["ext"], cfg["ext_present"]
    ERF_TYPE_AT, ERF_RLEN_AT = cfg["type_at"], cfg["rlen_at"]
    ERF_T_ETH, ERF_PAD_ETH = cfg["eth"], cfg["eth_pad"]
    for t in range(128):
        ERF_INNER[t] = -1
    for t, lt in cfg["inner"].items():
        ERF_INNER[t] = lt


def erf_skip(list frames):
    """Twin of roce.families.erf.skip_batch_reference: (payloads, link type), or None."""
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef const uint8_t *p
    cdef int n, pos, more, tbyte, inner, lt = -1
    cdef object f
    cdef list out = []
    for i in range(count):
        f = <object>PyList_GET_ITEM(frames, i)
        if not PyBytes_Check(f):
            raise TypeError("erf_skip: frame %d is not bytes" % i)
        p = <const uint8_t *>PyBytes_AS_STRING(f)
        n = PyBytes_GET_SIZE(f)
        if n < ERF_HDR or ((p[ERF_RLEN_AT] << 8) | p[ERF_RLEN_AT + 1]) < ERF_HDR:
            return None
        tbyte = p[ERF_TYPE_AT]
        pos = ERF_HDR
        more = tbyte & ERF_EXT_BIT
        while more:
            if pos + ERF_EXTSZ > n:
                return None
            more = p[pos] & 0x80
            pos += ERF_EXTSZ
        if (tbyte & 0x7F) == ERF_T_ETH:
            pos += ERF_PAD_ETH
        inner = ERF_INNER[tbyte & 0x7F]
        if inner < 0 or (lt >= 0 and inner != lt):
            return None
        lt = inner
        out.append(PyBytes_FromStringAndSize(<const char *>p + pos, n - pos if n > pos else 0))
    return out, (lt if lt >= 0 else None)
