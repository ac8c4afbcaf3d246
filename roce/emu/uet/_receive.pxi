# The emulator's reading of a received UET frame in C (roce.emu.uet.uetcodec.decode): the
# Ethernet, IPv4 and UDP fields a host checks and keeps, and the fields of uetcodec.RECEIVED,
# read by the UET family's walk (families/uet/_lines.pxi: ul_decode, ul_fields), so no layout
# is known here; the places and values come from uetcodec (uet_receive_configure).
# Twin: uetcodec.decode_python (its generated reader per packet shape), held to this on
# random and damaged frames by tests/test_uet_codec.py.
# What this leaves to Python (None back): frames too short for the prologue, not IPv4 with
# UDP to the UET port, a header cut short, a TSS header, an invalid response opcode.

cdef uint8_t UR_WANT[UL_SLOTS]  # slot -> 1 when RECEIVED names its field
cdef int UR_READING = -1
cdef int UR_ETYPE_AT = 0, UR_ETHERTYPE = 0, UR_TOS_AT = 0, UR_SRC_AT = 0, UR_DPORT_AT = 0
cdef int UR_PORT = 0, UR_ULEN_AT = 0, UR_UDP_AT = 0, UR_UET_AT = 0
cdef int UR_ECN_SHIFT = 0, UR_ECN_MASK = 0, UR_ECN_CE = 0, UR_DSCP_SHIFT = 0, UR_DSCP_MASK = 0
cdef object UR_RECEIVED = None  # the named tuple a host takes (uetcodec.Received)
cdef dict UR_ADDRESSES = {}  # a source address as a 32-bit number -> its dotted quad


def uet_receive_configure(dict cfg):
    """The reading (index into the UET readings), the places (``etype_at``, ``tos_at``,
    ``src_at``, ``dport_at``, ``ulen_at``, ``udp_at``, ``uet_at``), the values
    (``ethertype``, ``port``, the ECN and DSCP shifts and masks, ``ecn_ce``), the field
    names of RECEIVED (``received``) and the named tuple to answer with (``tuple``)."""
    global UR_READING, UR_ETYPE_AT, UR_ETHERTYPE, UR_TOS_AT, UR_SRC_AT, UR_DPORT_AT, UR_PORT
    global UR_ULEN_AT, UR_UDP_AT, UR_UET_AT, UR_ECN_SHIFT, UR_ECN_MASK, UR_ECN_CE
    global UR_DSCP_SHIFT, UR_DSCP_MASK, UR_RECEIVED
    if not UL_READY:
        raise RuntimeError("uet_receive_configure: uet_lines_configure was not called")
    cdef int s
    wanted = set(cfg["received"])
    memset(UR_WANT, 0, sizeof(UR_WANT))
    names = <list>UL_NAMES
    for s in range(UL_SLOTS):
        if names[s] in wanted:
            UR_WANT[s] = 1
            wanted.discard(names[s])
    if wanted:
        raise ValueError(f"uet_receive_configure: no slot for {sorted(wanted)}")
    if not 0 <= cfg["reading"] <= 1:
        raise ValueError("uet_receive_configure: reading 0 or 1")
    UR_READING = cfg["reading"]
    UR_ETYPE_AT, UR_ETHERTYPE = cfg["etype_at"], cfg["ethertype"]
    UR_TOS_AT, UR_SRC_AT = cfg["tos_at"], cfg["src_at"]
    UR_DPORT_AT, UR_PORT, UR_ULEN_AT = cfg["dport_at"], cfg["port"], cfg["ulen_at"]
    UR_UDP_AT, UR_UET_AT = cfg["udp_at"], cfg["uet_at"]
    UR_ECN_SHIFT, UR_ECN_MASK, UR_ECN_CE = cfg["ecn_shift"], cfg["ecn_mask"], cfg["ecn_ce"]
    UR_DSCP_SHIFT, UR_DSCP_MASK = cfg["dscp_shift"], cfg["dscp_mask"]
    UR_RECEIVED = cfg["tuple"]
    UR_ADDRESSES.clear()


cdef inline int ur_be16(const uint8_t *p, int at) noexcept nogil:
    return (p[at] << 8) | p[at + 1]


def uet_receive(bytes frame):
    """What a host takes from ``frame`` (uetcodec.Received: the RECEIVED fields, the
    payload, the source address, CE, the DSCP), or None where Python reads it."""
    if UR_READING < 0:
        raise RuntimeError("uet_receive: uet_receive_configure was not called")
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(frame)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(frame), end, n, start, stop
    cdef int pos, ses_read, typ, tos
    cdef uint32_t a
    if size < UR_UET_AT + 2 or size <= UR_SRC_AT + 3 or size <= UR_TOS_AT \
            or ur_be16(p, UR_ETYPE_AT) != UR_ETHERTYPE or ur_be16(p, UR_DPORT_AT) != UR_PORT:
        return None
    end = UR_UDP_AT + ur_be16(p, UR_ULEN_AT)  # the UDP length ends the UET packet
    n = (end if end < size else size) - UR_UET_AT
    if n < 2:
        return None
    pos = ul_decode(p + UR_UET_AT, <int>n, UR_READING, False, &ses_read)
    if pos < 0:
        return None
    typ = <int>UL_VAL[US_TYPE]
    if ses_read and ul_has(US_RSP_OP) and UL_RSP_INVALID[(UL_VAL[US_NH] & 15) * 64
                                                      + (UL_VAL[US_RSP_OP] & 63)]:
        return None
    cdef dict f = {}
    ul_fields(f, frame, UR_UET_AT, UR_READING, typ, ses_read, UR_WANT)
    start = UR_UET_AT + pos
    stop = end if end < size else size
    payload = PyBytes_FromStringAndSize(<const char *>p + start, stop - start if stop > start
                                        else 0)
    a = ((<uint32_t>p[UR_SRC_AT] << 24) | (<uint32_t>p[UR_SRC_AT + 1] << 16)
         | (<uint32_t>p[UR_SRC_AT + 2] << 8) | p[UR_SRC_AT + 3])
    src = UR_ADDRESSES.get(a)
    if src is None:
        if len(UR_ADDRESSES) > 4096:
            UR_ADDRESSES.clear()
        src = UR_ADDRESSES[a] = f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"
    tos = p[UR_TOS_AT]
    return tuple.__new__(UR_RECEIVED, (f, payload, src,
                                       (tos >> UR_ECN_SHIFT) & UR_ECN_MASK == UR_ECN_CE,
                                       (tos >> UR_DSCP_SHIFT) & UR_DSCP_MASK))
