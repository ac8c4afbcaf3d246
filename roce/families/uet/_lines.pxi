# Ultra Ethernet Transport's one-line text in C: `roce decode`'s line (after the time column)
# for every frame a UET row of the registry claims, from the frame's bytes: the walk, the
# datagram its UDP or IP length bounds, the PDS and SES headers read by the layouts of the
# reading, the derived fields, the expert checks, the Info text.  Every table comes from
# roce.families.uet.uetlines.tables() (uet_lines_configure), which takes it from the family's
# layouts, codes, checks and presentation: no position, width, name or tag is written here.
# Twin: the family's Python decoding and text (roce.families.uet.dissect, checks, present),
# held to these lines on random frames of both readings by tests/test_uet_lines.py.
# What this leaves to Python (None back): frames no UET row claims, a header cut short, a TSS
# header.  The number formatting helpers are native InfiniBand's (families/ib/_lines.pxi).

from libc.stdint cimport int16_t

DEF UL_SLOTS = 256      # flat fields (uetfields.names())
DEF UL_LAYOUTS = 64     # layouts of both readings
DEF UL_FIELDS = 24      # fields per layout
DEF UL_CHAIN = 6        # lines.MAX_CHAIN
DEF UL_CHECKS = 8
DEF UL_CODED = 16
DEF UL_TAGS = 16
DEF UL_BUF = 4096       # a line: every piece is bounded (names <= 64 bytes, numbers <= 20)

cdef extern from *:
    """
    static inline uint64_t roce_ul_be64(const unsigned char *q) {
        uint64_t v;
        memcpy(&v, q, 8);
        return __builtin_bswap64(v);
    }
    """
    uint64_t ul_be64 "roce_ul_be64"(const uint8_t *q) noexcept nogil

cdef struct UlField:
    int slot
    int byte0
    int nbytes
    int shift
    int shift64  # the shift when the field is read from 8 bytes at byte0
    uint64_t mask
    bint wide  # over 64 bits: not read into a slot (no line shows it; uet_decode reads it)
    bint boolean  # a Flag: True/False in the fields, not 1/0
    int bit
    int bits

cdef struct UlLayout:
    int size
    int nf
    int derive
    int pdc_byte
    int flag_byte
    UlField f[UL_FIELDS]

cdef struct UlReading:
    uint8_t pds_chain[32 * 128 * UL_CHAIN]
    uint8_t ses_first[16]
    uint8_t ses_chain[16 * 64 * UL_CHAIN]
    int16_t ren_from[UL_LAYOUTS * 64 * 2]
    int16_t ren_to[UL_LAYOUTS * 64 * 2]
    int entropy, prologue, std_som, std_cont, atomic, cswap, ack_ext
    uint8_t ack_cc[16]
    int nflags[32]
    int flag_slot[32][8]
    int flag_mask[32][8]
    int flag_shift[32][8]
    int ncoded
    int coded_slot[UL_CODED]
    uint8_t coded_known[UL_CODED][256]
    uint64_t mpr_unit
    int probe_from, probe_to, p_mask

cdef UlLayout UL_L[UL_LAYOUTS]
cdef UlReading UL_R[2]
cdef object UL_CTRL_NAMES = [None, None]
cdef object UL_SES_NAMES = [None, None]
cdef tuple UL_PDS_NAMES = None
cdef tuple UL_ACK_REQ = None
cdef tuple UL_NACK = None
cdef tuple UL_RSP = None
cdef tuple UL_RC = None
cdef bytes UL_PROTOCOL = None
cdef bytes UL_INVALID_RSP = None
cdef tuple UL_PDS_TAG_TEXT = None
cdef tuple UL_SES_TAG_TEXT = None
cdef tuple UL_CHECK_TAG = None
cdef int UL_NRES = 0
cdef int UL_RES[64]
cdef int UL_NPDS_TAGS = 0
cdef int UL_PDS_TAG_SLOT[UL_TAGS]
cdef int UL_NSES = 0
cdef int UL_SES_SOM[4]
cdef int UL_SES_NTAGS[4]
cdef int UL_SES_TAG_SLOT[4][UL_TAGS]
cdef int UL_NCHECKS = 0
cdef int UL_CHECK_KIND[UL_CHECKS]  # 1 sack, 2 window, 3 ses_length, 4 reserved, 5 unknown
cdef uint8_t UL_REQUESTS[32]
cdef uint8_t UL_RUDI[32]
cdef uint8_t UL_ACKS[32]
cdef uint8_t UL_NACKS[32]
cdef uint8_t UL_PDS_KNOWN[32]
cdef uint8_t UL_CARRIES_SES[32]
cdef uint8_t UL_NH_KNOWN[16]
cdef uint8_t UL_DATA_OPS[64]
cdef uint8_t UL_CSWAP_OPS[256]
cdef uint8_t UL_RSP_INVALID[16 * 64]
cdef int UL_CTRL, UL_NH_NONE, UL_TSS
cdef bint UL_READY = False
# slots of the fields the C reads by name (the derived fields, the checks, the Info)
cdef int US_TYPE, US_NH, US_CTL, US_FLAGS, US_PSN, US_SPDC, US_DPDC, US_CLEAR_OFF, US_CLEAR
cdef int US_PSN_OFF, US_START, US_PDC_MODE, US_CCC, US_CREDIT_T, US_RUDI_ID, US_ACK_OFF, US_CACK
cdef int US_ACK_PSN, US_PROBE, US_REQ, US_EPSN, US_SACK_OFF, US_SACK_PSN, US_SACK_BM, US_MPR
cdef int US_SVC, US_RCVD, US_OOO, US_CREDIT, US_NACK_CODE, US_VENDOR, US_NACK_PSN, US_NACK_PAY
cdef int US_CTRL_PAY, US_OPCODE, US_MSG, US_BUF_OFF, US_RESTART, US_REQ_LEN, US_MSG_OFF
cdef int US_PAY_LEN, US_EOM, US_SMALL_LEN, US_MED_LEN, US_SMALL_OFF, US_MED_OFF, US_RSP_OP, US_RC
cdef int US_RSP_MSG, US_RSP_RMSG, US_RSP_OFF, US_RSP_PAY, US_RSP_MOD, US_SOM, US_CC_STATE
cdef int US_CC_TYPE, US_HD

# per packet: the values read, and which are there (UL_HAVE[slot] == UL_GEN)
cdef uint64_t UL_VAL[UL_SLOTS]
cdef uint32_t UL_HAVE[UL_SLOTS]
cdef uint32_t UL_GEN = 0
cdef bint UL_WIDE[UL_SLOTS]
cdef object UL_NAMES = [None] * UL_SLOTS  # slot -> its flat field name
cdef object UL_KEYS = [None] * UL_LAYOUTS  # layout id -> its key
# per packet, for uet_decode: the layouts decoded in order, and the SES rename that applied
cdef int UL_HDRS[32]
cdef int UL_NHDRS = 0
cdef int UL_REN_FROM = -1, UL_REN_TO = -1


cdef int ul_slot(dict slots, str name) except -1:
    cdef int s = slots[name]
    if s < 0 or s >= UL_SLOTS:
        raise ValueError(f"uet_lines_configure: slot of {name} out of range")
    return s


def uet_lines_configure(dict cfg):
    """Receive the tables (roce.families.uet.uetlines.tables)."""
    global UL_PDS_NAMES, UL_ACK_REQ, UL_NACK, UL_RSP, UL_RC, UL_PROTOCOL, UL_INVALID_RSP
    global UL_PDS_TAG_TEXT, UL_SES_TAG_TEXT, UL_CHECK_TAG, UL_NRES, UL_NPDS_TAGS, UL_NSES
    global UL_NCHECKS, UL_CTRL, UL_NH_NONE, UL_TSS, UL_READY
    global US_TYPE, US_NH, US_CTL, US_FLAGS, US_PSN, US_SPDC, US_DPDC, US_CLEAR_OFF, US_CLEAR
    global US_PSN_OFF, US_START, US_PDC_MODE, US_CCC, US_CREDIT_T, US_RUDI_ID, US_ACK_OFF, US_CACK
    global US_ACK_PSN, US_PROBE, US_REQ, US_EPSN, US_SACK_OFF, US_SACK_PSN, US_SACK_BM, US_MPR
    global US_SVC, US_RCVD, US_OOO, US_CREDIT, US_NACK_CODE, US_VENDOR, US_NACK_PSN, US_NACK_PAY
    global US_CTRL_PAY, US_OPCODE, US_MSG, US_BUF_OFF, US_RESTART, US_REQ_LEN, US_MSG_OFF
    global US_PAY_LEN, US_EOM, US_SMALL_LEN, US_MED_LEN, US_SMALL_OFF, US_MED_OFF, US_RSP_OP, US_RC
    global US_RSP_MSG, US_RSP_RMSG, US_RSP_OFF, US_RSP_PAY, US_RSP_MOD, US_SOM, US_CC_STATE
    global US_CC_TYPE, US_HD
    cdef int i, j, k, bit, bits, last, lid, op, hd
    cdef UlLayout *L
    cdef UlReading *R
    UL_READY = False
    cdef dict slots = cfg["slots"]
    if len(slots) > UL_SLOTS or len(cfg["layouts"]) > UL_LAYOUTS:
        raise ValueError("uet_lines_configure: more fields or layouts than the tables hold")
    memset(UL_WIDE, 0, sizeof(UL_WIDE))
    if len(cfg["names"]) != len(slots) or len(cfg["names"]) > UL_SLOTS:
        raise ValueError("uet_lines_configure: one name per slot")
    for i, name in enumerate(cfg["names"]):
        UL_NAMES[i] = name
    for i, lay in enumerate(cfg["layouts"]):
        L = &UL_L[i]
        if len(lay["fields"]) > UL_FIELDS:
            raise ValueError(f"uet_lines_configure: layout {lay['key']} has too many fields")
        L.size, L.nf, L.derive = lay["size"], len(lay["fields"]), lay["derive"]
        L.pdc_byte, L.flag_byte = lay["pdc_byte"], lay["flag_byte"]
        UL_KEYS[i] = lay["key"]
        for j, (s, bit, bits, boolean) in enumerate(lay["fields"]):
            if s < 0 or s >= UL_SLOTS:
                raise ValueError("uet_lines_configure: slot out of range")
            L.f[j].slot = s
            L.f[j].boolean = boolean
            L.f[j].bit, L.f[j].bits = bit, bits
            L.f[j].byte0 = bit // 8
            last = (bit + bits - 1) // 8
            L.f[j].nbytes = last - bit // 8 + 1
            L.f[j].wide = L.f[j].nbytes > 8
            if L.f[j].wide:
                UL_WIDE[s] = True
                L.f[j].shift, L.f[j].mask = 0, 0
            else:
                L.f[j].shift = L.f[j].nbytes * 8 - bit % 8 - bits
                L.f[j].shift64 = 64 - bit % 8 - bits
                L.f[j].mask = 0xFFFFFFFFFFFFFFFFULL if bits == 64 else (<uint64_t>1 << bits) - 1
    for k, rd_ in enumerate(cfg["readings"]):
        R = &UL_R[k]
        if len(rd_["pds_chain"]) != 32 * 128 * UL_CHAIN or len(rd_["ses_chain"]) != \
                16 * 64 * UL_CHAIN or len(rd_["ses_first"]) != 16 or len(rd_["ack_cc"]) != 16:
            raise ValueError("uet_lines_configure: chain tables of the wrong size")
        memcpy(R.pds_chain, <const char *>(<bytes>rd_["pds_chain"]), 32 * 128 * UL_CHAIN)
        memcpy(R.ses_chain, <const char *>(<bytes>rd_["ses_chain"]), 16 * 64 * UL_CHAIN)
        memcpy(R.ses_first, <const char *>(<bytes>rd_["ses_first"]), 16)
        memcpy(R.ack_cc, <const char *>(<bytes>rd_["ack_cc"]), 16)
        memset(R.ren_from, 0xFF, sizeof(R.ren_from))  # -1: no rename
        memset(R.ren_to, 0xFF, sizeof(R.ren_to))
        for (lid, op, hd), pairs in rd_["renames"].items():
            if len(pairs) != 1:
                raise ValueError("uet_lines_configure: one rename per header and opcode")
            R.ren_from[(lid * 64 + op) * 2 + hd] = pairs[0][0]
            R.ren_to[(lid * 64 + op) * 2 + hd] = pairs[0][1]
        R.entropy, R.prologue = rd_["entropy"], rd_["prologue"]
        R.std_som, R.std_cont = rd_["std_som"], rd_["std_cont"]
        R.atomic, R.cswap, R.ack_ext = rd_["atomic"], rd_["cswap"], rd_["ack_ext"]
        for i in range(32):
            if len(rd_["flags"][i]) > 8:
                raise ValueError("uet_lines_configure: more than 8 flags")
            R.nflags[i] = len(rd_["flags"][i])
            for j, (s, m, sh) in enumerate(rd_["flags"][i]):
                R.flag_slot[i][j], R.flag_mask[i][j], R.flag_shift[i][j] = s, m, sh
        if len(rd_["coded"]) > UL_CODED:
            raise ValueError("uet_lines_configure: too many coded fields")
        R.ncoded = len(rd_["coded"])
        for i, (s, known) in enumerate(rd_["coded"]):
            R.coded_slot[i] = s
            if len(known) != 256:
                raise ValueError("uet_lines_configure: a code table of the wrong size")
            memcpy(R.coded_known[i], <const char *>(<bytes>known), 256)
        R.mpr_unit = rd_["mpr_unit"]
        R.probe_from, R.probe_to = rd_["probe"]
        R.p_mask = rd_["p_mask"]
        UL_CTRL_NAMES[k] = _ul_names(rd_["ctrl_names"])
        UL_SES_NAMES[k] = _ul_names(rd_["ses_names"])
    UL_PDS_NAMES = _ul_names(cfg["pds_names"], 32)
    UL_ACK_REQ = _ul_names(cfg["ack_requests"])
    UL_NACK = _ul_names(cfg["nack_codes"])
    UL_RSP = _ul_names(cfg["rsp_opcodes"])
    UL_RC = _ul_names(cfg["return_codes"])
    UL_PROTOCOL = _ul_piece(cfg["protocol"])
    UL_INVALID_RSP = _ul_piece(cfg["invalid_rsp_tag"])
    if len(cfg["reserved"]) > 64 or len(cfg["pds_tags"]) > UL_TAGS or \
            len(cfg["ses_tags"]) > 4 or len(cfg["checks"]) > UL_CHECKS:
        raise ValueError("uet_lines_configure: more reserved fields, tags or checks than held")
    UL_NRES = len(cfg["reserved"])
    for i, s in enumerate(cfg["reserved"]):
        UL_RES[i] = s
    UL_NPDS_TAGS = len(cfg["pds_tags"])
    UL_PDS_TAG_TEXT = tuple(_ul_piece(tag) for _s, tag in cfg["pds_tags"])
    for i, (s, _tag) in enumerate(cfg["pds_tags"]):
        UL_PDS_TAG_SLOT[i] = s
    UL_NSES = len(cfg["ses_tags"])
    UL_SES_TAG_TEXT = tuple(tuple(_ul_piece(tag) for _s, tag in tags)
                            for _som, tags in cfg["ses_tags"])
    for i, (som, tags) in enumerate(cfg["ses_tags"]):
        UL_SES_SOM[i] = som
        UL_SES_NTAGS[i] = len(tags)
        for j, (s, _tag) in enumerate(tags):
            UL_SES_TAG_SLOT[i][j] = s
    kinds = {"sack": 1, "window": 2, "ses_length": 3, "reserved": 4, "unknown": 5}
    UL_NCHECKS = len(cfg["checks"])
    UL_CHECK_TAG = tuple(_ul_piece(tag) for _name, tag in cfg["checks"])
    for i, (name, _tag) in enumerate(cfg["checks"]):
        UL_CHECK_KIND[i] = kinds[name]  # a check this file does not know: a KeyError here
    for i in range(32):
        UL_REQUESTS[i], UL_RUDI[i], UL_ACKS[i] = cfg["requests"][i], cfg["rudi"][i], \
            cfg["acks"][i]
        UL_NACKS[i], UL_PDS_KNOWN[i] = cfg["nacks"][i], cfg["pds_known"][i]
        UL_CARRIES_SES[i] = cfg["carries_ses"][i]
    for i in range(16):
        UL_NH_KNOWN[i] = cfg["nh_known"][i]
    for i in range(64):
        UL_DATA_OPS[i] = cfg["data_opcodes"][i]
    for i in range(256):
        UL_CSWAP_OPS[i] = cfg["cswap_opcodes"][i]
    for i in range(16 * 64):
        UL_RSP_INVALID[i] = cfg["rsp_invalid"][i]
    UL_CTRL, UL_NH_NONE, UL_TSS = cfg["ctrl"], cfg["nh_none"], cfg["tss_type"]
    US_TYPE, US_NH = ul_slot(slots, "uet.pds.type"), ul_slot(slots, "uet.pds.nh")
    US_CTL, US_FLAGS = ul_slot(slots, "uet.pds.ctl_type"), ul_slot(slots, "uet.pds.flags")
    US_PSN, US_SPDC = ul_slot(slots, "uet.pds.psn"), ul_slot(slots, "uet.pds.spdcid")
    US_DPDC = ul_slot(slots, "uet.pds.dpdcid")
    US_CLEAR_OFF = ul_slot(slots, "uet.pds.clear_psn_offset")
    US_CLEAR = ul_slot(slots, "uet.pds.clear_psn")
    US_PSN_OFF, US_START = ul_slot(slots, "uet.pds.psn_offset"), ul_slot(slots, "uet.pds.start_psn")
    US_PDC_MODE = ul_slot(slots, "uet.pds.pdc_mode")
    US_CCC = ul_slot(slots, "uet.pds.cc_state.ccc_id")
    US_CREDIT_T = ul_slot(slots, "uet.pds.cc_state.credit_target")
    US_RUDI_ID = ul_slot(slots, "uet.pds.rudi.pkt_id")
    US_ACK_OFF, US_CACK = ul_slot(slots, "uet.pds.ack_psn_offset"), ul_slot(slots, "uet.pds.cack_psn")
    US_ACK_PSN = ul_slot(slots, "uet.pds.ack_psn")
    US_PROBE = ul_slot(slots, "uet.pds.ack.probe_opaque")
    US_REQ, US_EPSN = ul_slot(slots, "uet.pds.flags.req"), ul_slot(slots, "uet.pds.ack.epsn")
    US_SACK_OFF = ul_slot(slots, "uet.pds.ack.sack_psn_offset")
    US_SACK_PSN = ul_slot(slots, "uet.pds.ack.sack_psn")
    US_SACK_BM, US_MPR = ul_slot(slots, "uet.pds.ack.sack_bitmap"), ul_slot(slots, "uet.pds.ack.mpr")
    US_CC_TYPE = ul_slot(slots, "uet.pds.ack.cc_type")
    US_CC_STATE = ul_slot(slots, "uet.pds.ack.cc_state")
    US_SVC = ul_slot(slots, "uet.pds.ack.cc_state.service_time")
    US_RCVD = ul_slot(slots, "uet.pds.ack.cc_state.rcvd_bytes")
    US_OOO = ul_slot(slots, "uet.pds.ack.cc_state.ooo_count")
    US_CREDIT = ul_slot(slots, "uet.pds.ack.cc_state.credit")
    US_NACK_CODE = ul_slot(slots, "uet.pds.nack.code")
    US_VENDOR = ul_slot(slots, "uet.pds.nack.vendor_code")
    US_NACK_PSN = ul_slot(slots, "uet.pds.nack.psn")
    US_NACK_PAY = ul_slot(slots, "uet.pds.nack.max_recv_psn_plus_1")
    US_CTRL_PAY = ul_slot(slots, "uet.pds.ctrl_payload")
    US_OPCODE, US_MSG = ul_slot(slots, "uet.ses.std.opcode"), ul_slot(slots, "uet.ses.std.message_id")
    US_BUF_OFF = ul_slot(slots, "uet.ses.std.buffer_offset")
    US_RESTART = ul_slot(slots, "uet.ses.std.restart_token")
    US_REQ_LEN = ul_slot(slots, "uet.ses.std.request_length")
    US_MSG_OFF = ul_slot(slots, "uet.ses.std.message_offset")
    US_PAY_LEN = ul_slot(slots, "uet.ses.std.payload_length")
    US_EOM, US_SOM = ul_slot(slots, "uet.ses.std.eom"), ul_slot(slots, "uet.ses.std.som")
    US_SMALL_LEN = ul_slot(slots, "uet.ses.small_req.req_length")
    US_MED_LEN = ul_slot(slots, "uet.ses.med_req.req_length")
    US_SMALL_OFF = ul_slot(slots, "uet.ses.small_req.buffer_offset")
    US_MED_OFF = ul_slot(slots, "uet.ses.med_req.buffer_offset")
    US_RSP_OP, US_RC = ul_slot(slots, "uet.ses.rsp.opcode"), ul_slot(slots, "uet.ses.rsp.return_code")
    US_RSP_MSG = ul_slot(slots, "uet.ses.rsp.message_id")
    US_RSP_RMSG = ul_slot(slots, "uet.ses.rsp.read_req_message_id")
    US_RSP_OFF = ul_slot(slots, "uet.ses.rsp.message_offset")
    US_RSP_PAY = ul_slot(slots, "uet.ses.rsp.payload_length")
    US_RSP_MOD = ul_slot(slots, "uet.ses.rsp.mod_length")
    US_HD = ul_slot(slots, "uet.ses.med_req.flags.hd")
    read = [US_TYPE, US_NH, US_CTL, US_FLAGS, US_PSN, US_SPDC, US_DPDC, US_CLEAR_OFF, US_PSN_OFF,
              US_CCC, US_CREDIT_T, US_RUDI_ID, US_ACK_OFF, US_CACK, US_REQ, US_EPSN, US_SACK_OFF,
              US_SACK_BM, US_MPR, US_CC_TYPE, US_SVC, US_RCVD, US_OOO, US_CREDIT, US_NACK_CODE,
              US_VENDOR, US_NACK_PSN, US_NACK_PAY, US_CTRL_PAY, US_OPCODE, US_MSG, US_BUF_OFF,
              US_REQ_LEN, US_MSG_OFF, US_PAY_LEN, US_EOM, US_SOM, US_SMALL_LEN, US_MED_LEN,
              US_SMALL_OFF, US_MED_OFF, US_RSP_OP, US_RC, US_RSP_MSG, US_RSP_RMSG, US_RSP_OFF,
              US_RSP_PAY, US_RSP_MOD, US_HD]
    read += [s for s, _tag in cfg["pds_tags"]] + list(cfg["reserved"])
    for s in read:
        if UL_WIDE[s]:
            raise ValueError("uet_lines_configure: a field the line reads is wider than 64 bits")
    UL_READY = True


cdef tuple _ul_names(list names, int size=256):
    if len(names) != size:
        raise ValueError("uet_lines_configure: a name table of the wrong size")
    return tuple(_ul_piece(n) for n in names)


cdef bytes _ul_piece(bytes b):
    if len(b) > IBL_MAX_PIECE:
        raise ValueError("uet_lines_configure: a text longer than 64 bytes")
    return b


# -- reading ------------------------------------------------------------------------------------

cdef inline bint ul_has(int s) noexcept nogil:
    return UL_HAVE[s] == UL_GEN


cdef inline void ul_set(int s, uint64_t v) noexcept nogil:
    UL_VAL[s] = v
    UL_HAVE[s] = UL_GEN


cdef inline void ul_unset(int s) noexcept nogil:
    UL_HAVE[s] = UL_GEN - 1


cdef inline int64_t ul_s16(uint64_t v) noexcept nogil:
    return <int64_t>v - 0x10000 if v & 0x8000 else <int64_t>v


cdef inline int ul_put(int lid, const uint8_t *p, int n, int pos) noexcept nogil:
    """Layout ``lid`` at ``pos`` into the slots; the position after it, or -1 when the bytes
    run out (dissect._put's DecodeError)."""
    cdef UlLayout *L = &UL_L[lid]
    cdef int j, k
    cdef uint64_t v
    cdef const uint8_t *q
    if pos + L.size > n:
        return -1
    for j in range(L.nf):
        if L.f[j].wide:
            UL_HAVE[L.f[j].slot] = UL_GEN
            continue
        q = p + pos + L.f[j].byte0
        if q + 8 <= p + n:  # one 8-byte read where the packet has 8 bytes left
            ul_set(L.f[j].slot, (ul_be64(q) >> L.f[j].shift64) & L.f[j].mask)
            continue
        v = 0
        for k in range(L.f[j].nbytes):
            v = (v << 8) | q[k]
        ul_set(L.f[j].slot, (v >> L.f[j].shift) & L.f[j].mask)
    return pos + L.size


cdef inline void ul_derive(int lid, const uint8_t *p, int at, UlReading *R) noexcept nogil:
    """What dissect._DERIVE adds after a layout."""
    cdef int d = UL_L[lid].derive
    cdef int64_t off
    if d == 2 or d == 3:  # _syn: the PDC mode byte and the start PSN
        ul_set(US_PDC_MODE, p[at + UL_L[lid].pdc_byte])
        ul_set(US_START, (UL_VAL[US_PSN] - UL_VAL[US_PSN_OFF]) & 0xFFFFFFFFULL)
    if d == 1 or d == 2:  # _request: the clear PSN offset signed, the clear PSN
        off = ul_s16(UL_VAL[US_CLEAR_OFF])
        ul_set(US_CLEAR_OFF, <uint64_t>off)
        ul_set(US_CLEAR, (UL_VAL[US_PSN] + <uint64_t>off) & 0xFFFFFFFFULL)
    elif d == 4:  # _ack
        if R.p_mask and UL_VAL[US_FLAGS] & R.p_mask:
            ul_set(R.probe_to, UL_VAL[R.probe_from])
            ul_unset(R.probe_from)
        if not ul_has(US_ACK_OFF):
            return
        off = ul_s16(UL_VAL[US_ACK_OFF])
        ul_set(US_ACK_OFF, <uint64_t>off)
        ul_set(US_ACK_PSN, (UL_VAL[US_CACK] + <uint64_t>off) & 0xFFFFFFFFULL)
    elif d == 5:  # _ack_ext
        off = ul_s16(UL_VAL[US_SACK_OFF])
        ul_set(US_SACK_OFF, <uint64_t>off)
        ul_set(US_SACK_PSN, (UL_VAL[US_CACK] + <uint64_t>off) & 0xFFFFFFFFULL)


cdef int ul_decode(const uint8_t *p, int n, int r, bint entropy, int *ses_read) noexcept nogil:
    """dissect.decode_steps of a whole packet into the slots: the position where its payload
    starts, or -1 when Python is to decode it (a header cut short, a TSS header)."""
    cdef UlReading *R = &UL_R[r]
    cdef int pos = 0, typ, nh, flags, j, lid, start, first, op, idx
    cdef const uint8_t *chain
    global UL_GEN, UL_NHDRS, UL_REN_FROM, UL_REN_TO
    UL_NHDRS = 0
    UL_REN_FROM = UL_REN_TO = -1
    UL_GEN += 1
    if UL_GEN == 0:  # wrapped: clear every mark
        memset(UL_HAVE, 0, sizeof(UL_HAVE))
        UL_GEN = 2
    ses_read[0] = 0
    if entropy:
        pos = ul_put(R.entropy, p, n, 0)
        if pos < 0:
            return -1
        ul_hdr(R.entropy)
    if pos >= n or p[pos] >> 3 == UL_TSS or n - pos < 4:
        return -1
    ul_put(R.prologue, p, n, pos)
    ul_hdr(R.prologue)
    typ, nh, flags = <int>UL_VAL[US_TYPE], <int>UL_VAL[US_NH], <int>UL_VAL[US_FLAGS]
    if typ == UL_CTRL:
        ul_unset(US_NH)
        ul_set(US_CTL, nh)
    for j in range(R.nflags[typ]):
        ul_set(R.flag_slot[typ][j], (flags & R.flag_mask[typ][j]) >> R.flag_shift[typ][j])
    pos += 2
    chain = &R.pds_chain[(typ * 128 + flags) * UL_CHAIN]
    for j in range(UL_CHAIN):
        lid = chain[j]
        if lid == 255:
            break
        if lid == 254:  # the ACK's CC state: 8 bytes as one number, its layout by CC type
            if n - pos < 8:
                return -1
            ul_set(US_CC_STATE, ul_be(p + pos, 8))
            lid = R.ack_cc[UL_VAL[US_CC_TYPE] & 15]
        elif lid == R.ack_ext and n - pos < UL_L[lid].size + 8:
            return -1
        start = pos
        pos = ul_put(lid, p, n, pos)
        if pos < 0:
            return -1
        ul_hdr(lid)
        if UL_L[lid].derive:
            ul_derive(lid, p, start, R)
    if not UL_CARRIES_SES[typ] or nh == UL_NH_NONE:
        return pos
    first = R.ses_first[nh]
    if first == 255:
        return pos
    ses_read[0] = 1
    start = pos
    pos = ul_put(first, p, n, pos)
    if pos < 0:
        return -1
    ul_hdr(first)
    if UL_L[first].flag_byte >= 0:
        ul_set(UL_L[first].flag_byte, p[start + 1])
    op = <int>UL_VAL[US_OPCODE] if ul_has(US_OPCODE) else 0
    chain = &R.ses_chain[(nh * 64 + op) * UL_CHAIN]
    for j in range(UL_CHAIN):
        lid = chain[j]
        if lid == 255:
            break
        if lid == 253:
            lid = R.std_som if UL_VAL[US_SOM] else R.std_cont
        elif lid == 252:
            lid = R.cswap if pos < n and UL_CSWAP_OPS[p[pos]] else R.atomic
        pos = ul_put(lid, p, n, pos)
        if pos < 0:
            return -1
        ul_hdr(lid)
    idx = (first * 64 + op) * 2 + (1 if ul_has(US_HD) and UL_VAL[US_HD] else 0)
    if R.ren_from[idx] >= 0 and ul_has(R.ren_from[idx]):
        UL_REN_FROM, UL_REN_TO = R.ren_from[idx], R.ren_to[idx]
        ul_set(R.ren_to[idx], UL_VAL[R.ren_from[idx]])
        ul_unset(R.ren_from[idx])
    return pos


cdef inline void ul_hdr(int lid) noexcept nogil:
    global UL_NHDRS
    if UL_NHDRS < 32:
        UL_HDRS[UL_NHDRS] = lid
        UL_NHDRS += 1


cdef inline uint64_t ul_be(const uint8_t *q, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(k):
        v = (v << 8) | q[i]
    return v


# -- checks (roce.families.uet.checks) --------------------------------------------------------

cdef inline bint ul_serial_le(uint64_t a, uint64_t b) noexcept nogil:
    return ((b - a) & 0xFFFFFFFFULL) < 0x80000000ULL


cdef inline int ul_bitlen(uint64_t v) noexcept nogil:
    cdef int k = 0
    while v:
        k += 1
        v >>= 1
    return k


cdef bint ul_check(int kind, UlReading *R, int payload, bint ses_read) noexcept nogil:
    cdef uint64_t base, cack, bm, need, missing, span, limit, d, top
    cdef int64_t off
    cdef int i, op
    if kind == 1:  # sack
        if not ul_has(US_SACK_BM):
            return False
        base, cack, bm = UL_VAL[US_SACK_PSN], UL_VAL[US_CACK], UL_VAL[US_SACK_BM]
        if not ul_serial_le(base, cack):
            return False
        span = ((cack - base) & 0xFFFFFFFFULL)
        span = (63 if span > 63 else span) + 1
        need = 0xFFFFFFFFFFFFFFFFULL if span == 64 else (<uint64_t>1 << span) - 1
        return (~bm & need) != 0
    if kind == 2:  # window
        if ul_has(US_CLEAR_OFF):
            off = <int64_t>UL_VAL[US_CLEAR_OFF]
            if off >= 0:
                return True
            if ul_has(US_START) and -off > <int64_t>UL_VAL[US_PSN_OFF] + 1:
                return True
        if R.mpr_unit and ul_has(US_MPR) and UL_VAL[US_MPR]:
            cack, limit = UL_VAL[US_CACK], UL_VAL[US_MPR] * R.mpr_unit
            if ul_has(US_ACK_PSN):
                d = (UL_VAL[US_ACK_PSN] - cack) & 0xFFFFFFFFULL
                if d < 0x80000000ULL and d > limit:
                    return True
            bm = UL_VAL[US_SACK_BM]
            if bm:
                top = (UL_VAL[US_SACK_PSN] + <uint64_t>ul_bitlen(bm) - 1) & 0xFFFFFFFFULL
                d = (top - cack) & 0xFFFFFFFFULL
                if d < 0x80000000ULL and d > limit:
                    return True
        return False
    if kind == 3:  # ses_length
        if not ses_read:
            return False
        if ul_has(US_RSP_PAY):
            return UL_VAL[US_RSP_PAY] != <uint64_t>payload
        if not ul_has(US_OPCODE) or not UL_DATA_OPS[UL_VAL[US_OPCODE] & 63]:
            return False
        if ul_has(US_PAY_LEN):
            if UL_VAL[US_PAY_LEN] != <uint64_t>payload:
                return True
            return UL_VAL[US_MSG_OFF] + <uint64_t>payload > UL_VAL[US_REQ_LEN]
        if ul_has(US_REQ_LEN):
            return (UL_VAL[US_EOM] and UL_VAL[US_REQ_LEN] != <uint64_t>payload) or \
                <uint64_t>payload > UL_VAL[US_REQ_LEN]
        if ul_has(US_SMALL_LEN) and UL_VAL[US_SMALL_LEN] != <uint64_t>payload:
            return True
        if ul_has(US_MED_LEN) and UL_VAL[US_MED_LEN] != <uint64_t>payload:
            return True
        return False
    if kind == 4:  # reserved
        for i in range(UL_NRES):
            if ul_has(UL_RES[i]) and UL_VAL[UL_RES[i]]:
                return True
        return False
    if kind == 5:  # unknown
        op = <int>UL_VAL[US_TYPE]
        if not UL_PDS_KNOWN[op]:
            return True
        if UL_CARRIES_SES[op] and ul_has(US_NH) and not UL_NH_KNOWN[UL_VAL[US_NH] & 15]:
            return True
        for i in range(R.ncoded):
            if ul_has(R.coded_slot[i]) and (UL_VAL[R.coded_slot[i]] > 255 or
                                            not R.coded_known[i][UL_VAL[R.coded_slot[i]]]):
                return True
        return ul_has(US_REQ) and UL_VAL[US_REQ] == 3
    return False


# -- the Info text (roce.families.uet.present.info) -------------------------------------------

cdef inline char *ul_name(char *o, tuple table, uint64_t v) noexcept:
    """codes.short(table, v): the name, or Unknown(v)."""
    if v < <uint64_t>len(table):
        return ibl_bytes(o, <object>PyTuple_GET_ITEM(table, v))
    o = ibl_cstr(o, b"Unknown(")
    o = ibl_dec(o, v, 0)
    o[0] = 41
    return o + 1


cdef inline char *ul_pdc(char *o) noexcept:
    o = ibl_cstr(o, b" PDC 0x")
    o = ibl_hex(o, UL_VAL[US_SPDC], 4)
    if ul_has(US_DPDC):
        o = ibl_cstr(o, b"->0x")
        o = ibl_hex(o, UL_VAL[US_DPDC], 4)
    return o


cdef inline char *ul_kv(char *o, const char *key, uint64_t v) noexcept:
    o = ibl_cstr(o, key)
    return ibl_dec(o, v, 0)


cdef inline char *ul_tag(char *o, bytes tag) noexcept:
    o[0] = 32
    o[1] = 91
    o = ibl_bytes(o + 2, tag)
    o[0] = 93
    return o + 1


cdef char *ul_info(char *o, int r, int payload, bint ses_read) noexcept:
    cdef UlReading *R = &UL_R[r]
    cdef int typ = <int>UL_VAL[US_TYPE], i, j
    cdef uint64_t req
    cdef char *begin = o
    o = ibl_bytes(o, <object>PyTuple_GET_ITEM(UL_PDS_NAMES, typ))
    if UL_REQUESTS[typ] and ul_has(US_PSN):
        o = ul_pdc(o)
        o = ul_kv(o, b" PSN=", UL_VAL[US_PSN])
        if ul_has(US_START):
            o = ul_kv(o, b" start=", UL_VAL[US_START])
        if ul_has(US_CCC):
            o = ul_kv(o, b" CCC=", UL_VAL[US_CCC])
            o = ibl_cstr(o, b" credit=0x")
            o = ibl_hex(o, UL_VAL[US_CREDIT_T], 6)
    elif UL_RUDI[typ] and ul_has(US_RUDI_ID):
        o = ul_kv(o, b" ID=", UL_VAL[US_RUDI_ID])
    elif UL_ACKS[typ] and ul_has(US_CACK):
        o = ul_pdc(o)
        o = ul_kv(o, b" CACK=", UL_VAL[US_CACK])
        if ul_has(US_ACK_PSN):
            o = ul_kv(o, b" ACK=", UL_VAL[US_ACK_PSN])
        else:
            o = ibl_cstr(o, b" probe=0x")
            o = ibl_hex(o, UL_VAL[US_PROBE], 4)
        if ul_has(US_REQ) and UL_VAL[US_REQ]:
            o = ibl_cstr(o, b" REQ=")
            o = ul_name(o, UL_ACK_REQ, UL_VAL[US_REQ])
        if ul_has(US_EPSN):
            o = ul_kv(o, b" EPSN=", UL_VAL[US_EPSN])
        if ul_has(US_SACK_PSN):
            o = ul_kv(o, b" SACK=", UL_VAL[US_SACK_PSN])
            o = ibl_cstr(o, b":0x")
            o = ibl_hex(o, UL_VAL[US_SACK_BM], 16)
            o = ul_kv(o, b" MPR=", UL_VAL[US_MPR])
            if ul_has(US_SVC):
                o = ul_kv(o, b" NSCC svc=", UL_VAL[US_SVC])
                o = ul_kv(o, b" rcvd=", UL_VAL[US_RCVD])
                o = ul_kv(o, b" ooo=", UL_VAL[US_OOO])
            elif ul_has(US_CREDIT):
                o = ul_kv(o, b" CREDIT credit=", UL_VAL[US_CREDIT])
                o = ul_kv(o, b" ooo=", UL_VAL[US_OOO])
    elif UL_NACKS[typ] and ul_has(US_NACK_CODE):
        o = ul_pdc(o)
        o = ul_kv(o, b" PSN=", UL_VAL[US_NACK_PSN])
        o[0] = 32
        o = ul_name(o + 1, UL_NACK, UL_VAL[US_NACK_CODE])
        o = ul_kv(o, b" payload=", UL_VAL[US_NACK_PAY])
        if UL_VAL[US_VENDOR]:
            o = ul_kv(o, b" vendor=", UL_VAL[US_VENDOR])
    elif typ == UL_CTRL and ul_has(US_PSN):
        o[0] = 32
        o = ul_name(o + 1, <tuple>UL_CTRL_NAMES[r], UL_VAL[US_CTL])
        o = ul_pdc(o)
        o = ul_kv(o, b" PSN=", UL_VAL[US_PSN])
        if ul_has(US_START):
            o = ul_kv(o, b" start=", UL_VAL[US_START])
        if UL_VAL[US_CTRL_PAY]:
            o = ibl_cstr(o, b" payload=0x")
            o = ibl_hex(o, UL_VAL[US_CTRL_PAY], 8)
    # the SES part (present._ses_text)
    if ul_has(US_OPCODE) and (ul_has(US_MSG) or ul_has(US_SMALL_LEN) or ul_has(US_MED_LEN)):
        o = ibl_cstr(o, b" SES ")
        o = ul_name(o, <tuple>UL_SES_NAMES[r], UL_VAL[US_OPCODE])
        if ul_has(US_MSG):
            o = ul_kv(o, b" msg=", UL_VAL[US_MSG])
            o = ul_kv(o, b" off=", UL_VAL[US_BUF_OFF] if ul_has(US_BUF_OFF) else UL_VAL[US_RESTART])
            if ul_has(US_REQ_LEN):
                o = ul_kv(o, b" len=", UL_VAL[US_REQ_LEN])
            if ul_has(US_MSG_OFF):
                o = ul_kv(o, b" moff=", UL_VAL[US_MSG_OFF])
        elif ul_has(US_SMALL_LEN):
            if ul_has(US_SMALL_OFF):
                o = ul_kv(o, b" off=", UL_VAL[US_SMALL_OFF])
            o = ul_kv(o, b" len=", UL_VAL[US_SMALL_LEN])
        else:
            if ul_has(US_MED_OFF):
                o = ul_kv(o, b" off=", UL_VAL[US_MED_OFF])
            o = ul_kv(o, b" len=", UL_VAL[US_MED_LEN])
    elif ul_has(US_RSP_OP):
        o = ibl_cstr(o, b" SES ")
        o = ul_name(o, UL_RSP, UL_VAL[US_RSP_OP])
        o[0] = 32
        o = ul_name(o + 1, UL_RC, UL_VAL[US_RC])
        if ul_has(US_RSP_MSG):
            o = ul_kv(o, b" msg=", UL_VAL[US_RSP_MSG])
        if ul_has(US_RSP_RMSG):
            o = ul_kv(o, b" rmsg=", UL_VAL[US_RSP_RMSG])
            o = ul_kv(o, b" off=", UL_VAL[US_RSP_OFF])
        if ul_has(US_RSP_PAY):
            o = ul_kv(o, b" len=", UL_VAL[US_RSP_PAY])
        elif ul_has(US_RSP_MOD):
            o = ul_kv(o, b" len=", UL_VAL[US_RSP_MOD])
    # tags: PDS flags, SES flags, an invalid response opcode, the checks that fire
    for i in range(UL_NPDS_TAGS):
        if ul_has(UL_PDS_TAG_SLOT[i]) and UL_VAL[UL_PDS_TAG_SLOT[i]]:
            o = ul_tag(o, <bytes>PyTuple_GET_ITEM(UL_PDS_TAG_TEXT, i))
    for i in range(UL_NSES):
        if ul_has(UL_SES_SOM[i]):
            for j in range(UL_SES_NTAGS[i]):
                if ul_has(UL_SES_TAG_SLOT[i][j]) and UL_VAL[UL_SES_TAG_SLOT[i][j]]:
                    o = ul_tag(o, <bytes>PyTuple_GET_ITEM(
                        <tuple>PyTuple_GET_ITEM(UL_SES_TAG_TEXT, i), j))
    if ses_read and ul_has(US_RSP_OP) and UL_RSP_INVALID[(UL_VAL[US_NH] & 15) * 64
                                                      + (UL_VAL[US_RSP_OP] & 63)]:
        o = ul_tag(o, UL_INVALID_RSP)
    for i in range(UL_NCHECKS):
        if ul_check(UL_CHECK_KIND[i], R, payload, ses_read):
            o = ul_tag(o, <bytes>PyTuple_GET_ITEM(UL_CHECK_TAG, i))
    return o


cdef inline int ul_ipv4(char *out, const uint8_t *a) noexcept nogil:
    """Dotted decimal, as socket.inet_ntop(AF_INET) writes it (glibc's goes through
    sprintf: most of a line's cost); its length."""
    cdef char *o = out
    cdef int i
    for i in range(4):
        if i:
            o[0] = 46
            o += 1
        o = ibl_dec(o, a[i], 0)
    o[0] = 0
    return <int>(o - out)


cdef inline int ul_ipv6(char *out, const uint8_t *a) noexcept:
    if inet_ntop(AF_INET6, a, out, 64) == NULL:
        return 0
    return <int>strlen(out)


def uet_lines(list datas, list origlens, int linktype, int udp_port, bytes ports,
              bytes protos, bytes arrow):
    """Per frame of a batch: ``src -> dst UET origlen Info`` (Summarizer.line after the time
    column) for a frame a UET row claims (``ports``: a byte per UDP destination port,
    ``protos`` per IP protocol: 0, or 1 + 2 * reading + entropy), None where Python makes
    the line."""
    if not UL_READY:
        raise RuntimeError("uet_lines: uet_lines_configure was not called")
    if len(ports) != 65536 or len(protos) != 256:
        raise ValueError("uet_lines: a port table of 65536 bytes, a protocol table of 256")
    cdef Py_ssize_t n = PyList_GET_SIZE(datas), i
    if PyList_GET_SIZE(origlens) < n:
        raise ValueError("uet_lines: fewer lengths than frames")
    cdef const uint8_t *pmap = <const uint8_t *>PyBytes_AS_STRING(ports)
    cdef const uint8_t *qmap = <const uint8_t *>PyBytes_AS_STRING(protos)
    cdef WalkResult w
    cdef const uint8_t *p
    cdef int flen, code, start = 0, end = 0, pos, ses_read, ns, nd
    cdef char buf[UL_BUF]
    cdef char src[64]
    cdef char dst[64]
    cdef char *o
    cdef object f, line
    if len(arrow) > IBL_MAX_PIECE:
        return [None] * n
    out = PyList_New(n)
    for i in range(n):
        line = None
        f = <object>PyList_GET_ITEM(datas, i)
        p = <const uint8_t *>PyBytes_AS_STRING(f)
        flen = <int>PyBytes_GET_SIZE(f)
        do_walk(p, flen, linktype, udp_port, &w)
        code = 0
        if w.status == S_NR_PORT:
            code = pmap[w.err_a & 0xFFFF]
            start = w.udp_off + 8
            end = w.udp_off + ((p[w.udp_off + 4] << 8) | p[w.udp_off + 5])
        elif w.status == S_NR_PROTO and w.l3_off >= 0:
            code = qmap[w.err_a & 0xFF]
            start = w.l3_off + w.l3_len
            if w.l3_kind == L3K_IPV4:
                end = w.l3_off + ((p[w.l3_off + 2] << 8) | p[w.l3_off + 3])
            else:
                end = start + ((p[w.l3_off + 4] << 8) | p[w.l3_off + 5])
        if code:
            if end < 0 or end > flen:
                end = flen
            elif end < start:
                end = start
            pos = ul_decode(p + start, end - start, (code - 1) >> 1, (code - 1) & 1,
                            &ses_read)
            if pos >= 0:
                if w.l3_kind == L3K_IPV4:
                    ns = ul_ipv4(src, p + w.l3_off + 12)
                    nd = ul_ipv4(dst, p + w.l3_off + 16)
                else:
                    ns = ul_ipv6(src, p + w.l3_off + 8)
                    nd = ul_ipv6(dst, p + w.l3_off + 24)
                if ns > 0 and nd > 0:
                    o = ibl_pad(buf, src, ns, 12, True)
                    o[0] = 32
                    o = ibl_bytes(o + 1, arrow)
                    o[0] = 32
                    o = ibl_pad(o + 1, dst, nd, 12, False)
                    o[0] = 32
                    o = ibl_bytes(o + 1, UL_PROTOCOL)
                    o[0] = 32
                    o = ibl_dec(o + 1, <object>PyList_GET_ITEM(origlens, i), 0)
                    o[0] = 32
                    o = ul_info(o + 1, (code - 1) >> 1, end - start - pos, ses_read)
                    line = PyUnicode_DecodeUTF8(buf, o - buf, NULL)
        Py_INCREF(line)
        PyList_SET_ITEM(out, i, line)
    return out


# -- the flat fields (roce.families.uet.dissect.decode) ---------------------------------------

cdef inline object ul_value(int s, bint boolean):
    """A slot's value as dissect holds it: bool, signed (the PSN offsets), or int."""
    if boolean:
        return UL_VAL[s] != 0
    if s == US_CLEAR_OFF or s == US_ACK_OFF or s == US_SACK_OFF:
        return <int64_t>UL_VAL[s]
    return UL_VAL[s]


cdef int ul_fields(dict f, bytes data, int base, int r, int typ, bint ses_read,
                   const uint8_t *want) except -1:
    """The flat fields of the packet ``ul_decode`` just read (at ``base`` in ``data``) into
    ``f``, in the order dissect's plans make them: every one (``want`` NULL, with the layer
    marks ``uet``, ``uet.pds``, ``uet.ses``), or only the slots ``want`` marks."""
    cdef UlReading *R = &UL_R[r]
    cdef UlLayout *L
    cdef int h, j, lid, s, d, start = base
    names = <list>UL_NAMES
    if want == NULL:
        f["uet"] = True
    for h in range(UL_NHDRS):
        lid = UL_HDRS[h]
        L = &UL_L[lid]
        if lid == R.prologue:
            if want == NULL:
                f["uet.pds"] = True
            if want == NULL or want[US_TYPE]:
                f[names[US_TYPE]] = typ
            if typ == UL_CTRL:
                if want == NULL or want[US_CTL]:
                    f[names[US_CTL]] = UL_VAL[US_CTL]
            elif want == NULL or want[US_NH]:
                f[names[US_NH]] = UL_VAL[US_NH]
            if want == NULL or want[US_FLAGS]:
                f[names[US_FLAGS]] = UL_VAL[US_FLAGS]
            for j in range(R.nflags[typ]):
                s = R.flag_slot[typ][j]
                if want == NULL or want[s]:
                    f[names[s]] = ul_value(s, (R.flag_mask[typ][j] & (R.flag_mask[typ][j] - 1))
                                           == 0)
            if ses_read and want == NULL:
                f["uet.ses"] = True
            start += L.size
            continue
        for j in range(L.nf):
            s = L.f[j].slot
            if L.f[j].wide:
                if want == NULL or want[s]:
                    f[names[s]] = int.from_bytes(
                        data[start + L.f[j].bit // 8:start + (L.f[j].bit + L.f[j].bits) // 8],
                        "big")
            elif s == UL_REN_FROM:
                if want == NULL or want[UL_REN_TO]:
                    f[names[UL_REN_TO]] = UL_VAL[UL_REN_TO]
            # (the provider's ACK of a probe: its opaque comes after)
            elif ul_has(s) and (want == NULL or want[s]):
                f[names[s]] = ul_value(s, L.f[j].boolean)
        if L.flag_byte >= 0 and (want == NULL or want[L.flag_byte]):
            f[names[L.flag_byte]] = UL_VAL[L.flag_byte]
        start += L.size
    if ul_has(US_CC_STATE) and (want == NULL or want[US_CC_STATE]):
        f[names[US_CC_STATE]] = UL_VAL[US_CC_STATE]
    for h in range(UL_NHDRS):  # what dissect._DERIVE adds, in its order
        d = UL_L[UL_HDRS[h]].derive
        if d == 2 or d == 3:
            if want == NULL or want[US_PDC_MODE]:
                f[names[US_PDC_MODE]] = UL_VAL[US_PDC_MODE]
            if want == NULL or want[US_START]:
                f[names[US_START]] = UL_VAL[US_START]
        if d == 1 or d == 2:
            if want == NULL or want[US_CLEAR]:
                f[names[US_CLEAR]] = UL_VAL[US_CLEAR]
        elif d == 4:
            if ul_has(US_PROBE) and (want == NULL or want[US_PROBE]):
                f[names[US_PROBE]] = UL_VAL[US_PROBE]
            if ul_has(US_ACK_PSN) and (want == NULL or want[US_ACK_PSN]):
                f[names[US_ACK_PSN]] = UL_VAL[US_ACK_PSN]
        elif d == 5:
            if want == NULL or want[US_SACK_PSN]:
                f[names[US_SACK_PSN]] = UL_VAL[US_SACK_PSN]
    return 0


def uet_decode(bytes data, int r, bint entropy):
    """dissect.decode of one packet's UET bytes, read by the layouts in C: (flat fields in
    the order dissect's plans make them, the layouts' keys, the layers, whether an expert
    check fires: its sentence is Python's, ``checks.check``); None where Python decodes
    (a header cut short, a TSS header, an invalid response opcode)."""
    if not UL_READY:
        raise RuntimeError("uet_decode: uet_lines_configure was not called")
    if r < 0 or r > 1:
        raise ValueError("uet_decode: reading 0 or 1")
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(data)
    cdef int n = <int>PyBytes_GET_SIZE(data), pos, ses_read, h, j, lid, typ
    cdef UlReading *R = &UL_R[r]
    pos = ul_decode(p, n, r, entropy, &ses_read)
    if pos < 0:
        return None
    typ = <int>UL_VAL[US_TYPE]
    if ses_read and ul_has(US_RSP_OP) and UL_RSP_INVALID[(UL_VAL[US_NH] & 15) * 64
                                                      + (UL_VAL[US_RSP_OP] & 63)]:
        return None  # the sentence of Wireshark's uet.ses.rsp.invalid_opcode: Python's
    keys = <list>UL_KEYS
    headers = PyTuple_New(UL_NHDRS)
    for h in range(UL_NHDRS):
        key = keys[UL_HDRS[h]]
        Py_INCREF(key)
        PyTuple_SET_ITEM(headers, h, key)
    cdef dict f = {}
    ul_fields(f, data, 0, r, typ, ses_read, NULL)
    f["payload.len"] = n - pos
    cdef bint fired = False
    for j in range(UL_NCHECKS):
        if ul_check(UL_CHECK_KIND[j], R, n - pos, ses_read):
            fired = True
            break
    layers = ("uet", "uet.pds", "uet.ses") if UL_CARRIES_SES[typ] and \
        UL_VAL[US_NH] != UL_NH_NONE else ("uet", "uet.pds")
    return f, headers, layers, fired
