# Native InfiniBand in C: the bulk scan behind `roce decode`'s one-line path for link type
# 247, and the VCRC (by _crc32.c's CRC-16, carry-less-multiply folding).  Twins:
# roce.families.ib.native.scan_reference and roce.families.ib.crc.vcrc (hypothesis tests in
# tests/test_families.py and tests/test_vcrc.py prove agreement).  The LRH field positions,
# the VCRC polynomial and the VL mask come from roce.families (ib_configure); the BTH, GRH,
# ETH plans and ICRC masks are the RoCE tables configure() loaded.

cdef uint16_t VCRC_INIT_V = 0xFFFF
cdef int IB_VCRC = 2
cdef bint IB_VCRC_READY = False


def ib_configure(dict cfg):
    """Receive the VCRC's polynomial (bit-reflected), initial value and size
    (roce.families.ib.crc); the CRC-16 kernels of _crc32.c derive their tables and folding
    constants from the polynomial."""
    global VCRC_INIT_V, IB_VCRC, IB_VCRC_READY
    roce_crc16r_setup(cfg["vcrc_poly"])
    VCRC_INIT_V = cfg["vcrc_init"]
    IB_VCRC = cfg["vcrc_size"]
    IB_VCRC_READY = True


cdef inline uint16_t vcrc_raw(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef uint16_t c = roce_crc16r(VCRC_INIT_V, p, n) ^ 0xFFFF
    return <uint16_t>(((c & 0xFF) << 8) | (c >> 8))  # stored little-endian, read big-endian


def vcrc_impl():
    """Name of the CRC-16 (VCRC) kernel in use."""
    return roce_crc16r_impl().decode()


def vcrc_force(name):
    """Testing aid: force a CRC-16 (VCRC) kernel by name (None: automatic)."""
    if name is None:
        roce_crc16r_force(NULL)
    else:
        b = name.encode()
        roce_crc16r_force(b)


def ib_vcrc(const uint8_t[::1] data):
    """Twin of roce.families.ib.crc.vcrc."""
    if data.shape[0] == 0:
        return vcrc_raw(NULL, 0)
    return vcrc_raw(&data[0], data.shape[0])


def ib_link_packet(uint32_t word):
    """A link packet's six bytes: ``word`` big-endian, then its LPCRC (the VCRC's CRC-16 over
    those four bytes, read big-endian).  Twin of roce.families.ib.flowcontrol.packet."""
    cdef uint8_t b[6]
    cdef uint16_t c
    b[0] = word >> 24
    b[1] = (word >> 16) & 0xFF
    b[2] = (word >> 8) & 0xFF
    b[3] = word & 0xFF
    c = vcrc_raw(b, 4)
    b[4] = c >> 8
    b[5] = c & 0xFF
    return PyBytes_FromStringAndSize(<const char *>b, 6)


# (``ib_link_word`` and ``ib_frame`` read a bytes object in place, and any other buffer as the
# bytes it holds: the emulator hands bytes per packet, and a typed memoryview's setup cost
# more than the work)

def ib_link_word(p):
    """The first four bytes of the link packet ``p`` as a big-endian word when its LPCRC is
    right; -1 when it is wrong or ``p`` is shorter than a link packet.  Twin of
    roce.families.ib.flowcontrol.checked_word."""
    cdef bytes b = p if PyBytes_Check(p) else bytes(p)
    cdef const uint8_t *q = <const uint8_t *>PyBytes_AS_STRING(b)
    if PyBytes_GET_SIZE(b) < 6 or vcrc_raw(q, 4) != ((<uint16_t>q[4] << 8) | q[5]):
        return -1
    return (<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3]


def ib_frame(lrh, transport):
    """An InfiniBand packet: the LRH (IBA local: BTH follows), ``transport`` (BTH through
    pad), the ICRC by IBA's LRH rule and the VCRC.  Twin of
    roce.emu.ib.framing.frame_reference."""
    cdef bytes h = lrh if PyBytes_Check(lrh) else bytes(lrh)
    cdef bytes tr = transport if PyBytes_Check(transport) else bytes(transport)
    if PyBytes_GET_SIZE(h) != IB_LRH or PyBytes_GET_SIZE(tr) < SZ_BTH:
        raise ValueError("ib_frame: an LRH of %d bytes and a transport from a BTH" % IB_LRH)
    cdef Py_ssize_t t = PyBytes_GET_SIZE(tr), end = IB_LRH + t + 4
    cdef bytes out = PyBytes_FromStringAndSize(NULL, end + IB_VCRC)
    cdef uint8_t *q = <uint8_t *>PyBytes_AS_STRING(out)
    cdef uint32_t crc
    cdef uint16_t v
    memcpy(q, PyBytes_AS_STRING(h), IB_LRH)
    memcpy(q + IB_LRH, PyBytes_AS_STRING(tr), t)
    crc = ib_icrc_raw(q, False, IB_LRH, end - 4)
    q[end - 4] = crc & 0xFF  # the ICRC is stored little-endian
    q[end - 3] = (crc >> 8) & 0xFF
    q[end - 2] = (crc >> 16) & 0xFF
    q[end - 1] = crc >> 24
    v = vcrc_raw(q, end)
    q[end] = v >> 8
    q[end + 1] = v & 0xFF
    return out


def ib_frame_ok(bytes packet):
    """Whether the VCRC and then the ICRC (by IBA's LRH rule, BTH after the LRH, whatever
    its LNH says) of ``packet`` are right.  Twin of roce.emu.ib.framing.frame_ok_reference."""
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(packet)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(packet), end = n - IB_VCRC
    if end < 0 or vcrc_raw(p, end) != ((<uint16_t>p[end] << 8) | p[end + 1]):
        return False
    if end - 4 < IB_LRH + SZ_BTH:
        raise ValueError("ib_frame_ok: a packet shorter than an LRH, a BTH and the CRCs")
    return bswap32(ib_icrc_raw(p, False, IB_LRH, end - 4)) == stored(p, end - 4)


cdef uint32_t ib_icrc_raw(const uint8_t *p, bint grh, int bth_off, int icrc_off) noexcept nogil:
    cdef uint8_t buf[8 + 40 + 12]
    cdef int i, k
    if grh:
        memset(buf, 0xFF, 8)
        memcpy(buf + 8, p + IB_LRH, SZ_GRH)
        for i in range(SZ_GRH):
            buf[8 + i] |= M_GRH[i]
        k = 8 + SZ_GRH
    else:
        memcpy(buf, p, IB_LRH)
        buf[0] |= IB_VL_MASK
        k = IB_LRH
    memcpy(buf + k, p + bth_off, SZ_BTH)
    for i in range(SZ_BTH):
        buf[k + i] |= M_BTH[i]
    cdef uint32_t crc = roce_crc32(0, buf, k + SZ_BTH)
    if icrc_off > bth_off + SZ_BTH:
        crc = roce_crc32(crc, p + bth_off + SZ_BTH, icrc_off - bth_off - SZ_BTH)
    return crc


cdef int ib_walk(const uint8_t *p, int n, WalkResult *w, int *lnh) noexcept nogil:
    """0 when the packet is whole and well formed (VCRC included); 1 otherwise (the
    Python decoder then says why).  The walk is the fast path's (do_lrh)."""
    lnh[0] = lrd(p, 0) if n >= IB_LRH else -1
    if do_walk(p, n, LT_IB, 0, w) != S_OK or n < w.l4_end + IB_VCRC:
        return 1
    return 0


def ib_scan(list frames, dict cols):
    """Walk every native InfiniBand frame; BTH, first-ETH keys, LIDs and both CRC checks into
    preallocated columns (roce.families.ib.native.SCAN_COLUMNS)."""
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef WalkResult w
    cdef const uint8_t *p
    cdef const uint8_t *b
    cdef object f
    cdef int j, op, lnh, n
    cdef uint8_t[::1] c_status = cols["status"]
    cdef uint8_t[::1] c_lnh = cols["lnh"]
    cdef uint8_t[::1] c_opcode = cols["opcode"]
    cdef uint32_t[::1] c_destqp = cols["destqp"]
    cdef uint32_t[::1] c_psn = cols["psn"]
    cdef uint8_t[::1] c_flags = cols["flags"]
    cdef uint16_t[::1] c_dlid = cols["dlid"]
    cdef uint16_t[::1] c_slid = cols["slid"]
    cdef int32_t[::1] c_bthoff = cols["bth_off"]
    cdef int32_t[::1] c_end = cols["icrc_end"]
    cdef uint64_t[::1] c_k0 = cols["key0"]
    cdef uint64_t[::1] c_k1 = cols["key1"]
    cdef uint64_t[::1] c_k2 = cols["key2"]
    cdef uint8_t[::1] c_icrc = cols["icrc_ok"]
    cdef uint8_t[::1] c_vcrc = cols["vcrc_ok"]
    cdef uint64_t kv[MAXKEY]
    for i in range(count):
        f = <object>PyList_GET_ITEM(frames, i)
        if not PyBytes_Check(f):
            raise TypeError("ib_scan: frame %d is not bytes" % i)
        p = <const uint8_t *>PyBytes_AS_STRING(f)
        n = PyBytes_GET_SIZE(f)
        kv[0] = kv[1] = kv[2] = 0
        c_status[i] = ib_walk(p, n, &w, &lnh)
        c_lnh[i] = lnh if lnh >= 0 else 0
        if c_status[i]:
            c_opcode[i] = c_flags[i] = c_icrc[i] = c_vcrc[i] = 0
            c_destqp[i] = c_psn[i] = c_dlid[i] = c_slid[i] = 0
            c_bthoff[i] = c_end[i] = -1
        else:
            b = p + w.bth_off
            op = w.opcode
            c_opcode[i] = op
            c_flags[i] = ((FL_SE if rd(p, w.bth_off, F_BTH_SE) else 0)
                          | (FL_M if rd(p, w.bth_off, F_BTH_M) else 0)
                          | (FL_FECN if rd(p, w.bth_off, F_BTH_FECN) else 0)
                          | (FL_BECN if rd(p, w.bth_off, F_BTH_BECN) else 0)
                          | (FL_A if rd(p, w.bth_off, F_BTH_A) else 0))
            c_destqp[i] = rd(p, w.bth_off, F_BTH_DESTQP)
            c_psn[i] = rd(p, w.bth_off, F_BTH_PSN)
            c_dlid[i] = lrd(p, 2)
            c_slid[i] = lrd(p, 3)
            c_bthoff[i] = w.bth_off
            c_end[i] = w.l4_end
            for j in range(K_COUNT[op]):
                kv[j] = (rd64(b + K_OFF[op][j], K_N[op][j]) >> K_SHIFT[op][j]) & K_MASK[op][j]
            c_icrc[i] = bswap32(ib_icrc_raw(p, lnh == L3K_LRH_GRH, w.bth_off, w.icrc_off)) == stored(p, w.icrc_off)
            c_vcrc[i] = vcrc_raw(p, w.l4_end) == ((<uint16_t>p[w.l4_end] << 8) | p[w.l4_end + 1])
        c_k0[i] = kv[0]
        c_k1[i] = kv[1]
        c_k2[i] = kv[2]
    return count
