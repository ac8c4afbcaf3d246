# Per-flow capture analysis: the compiled twin of roce.analysis.flowref.Analyzer.
#
# Included by _fastpath.pyx: it walks frames with do_walk, checks ICRCs with icrc_raw and
# sequences PSNs with PSNTracker's C methods, all without leaving C for a clean packet.
# roce/analysis/flowrules.py is the one definition of the rules (its docstring has the
# definitions and the steps to add an event kind); this file holds no rule table of its own.
# Everything it numbers or words - opcode classes, event kinds with their severities, texts
# and counters, the flow counters' layout, AETH syndrome rules and the congestion marks - arrives in
# configure_flows() from roce.analysis.cflows.engine_config(), derived from flowrules,
# roce.headers, roce.opcodes and roce.locate (L3 kinds are the fast path's L3K_*, configured
# from roce.locate).  Events are raised by their flowrules name.
# It follows roce/analysis/flowref.py function by function (_packet, _feed, _advance, _late,
# ...), every frame in capture order; a property test compares the two engines' reports.

from libc.string cimport memcmp

DEF A_NKINDS = 11      # message kinds, flowrules.K_* (checked at configuration)
DEF A_NEVENTS = 32     # event kinds, at most
DEF A_NCOUNTERS = 32   # flow counters, at most
DEF A_MAX_ADDR = 36    # longest address pair (LIDs and GIDs of native InfiniBand with a GRH)

# Numberings the C code switches on; configure_flows() checks they are flowrules' / psn's.
cdef enum:
    AC_DATA = 0
    AC_READ = 1
    AC_ATOMIC = 2
    AC_ONLYREQ = 3
    AC_READ_RESP = 4
    AC_ACK = 5
    AC_ATOMIC_ACK = 6
    AC_CNP = 7

cdef enum:
    AP_FIRST = 0
    AP_MIDDLE = 1
    AP_LAST = 2
    AP_ONLY = 3

cdef enum:
    AEV_FIRST = 0
    AEV_IN_ORDER = 1
    AEV_GAP = 2
    AEV_LATE = 3
    AEV_DUPLICATE = 4

cdef enum:
    ASYN_ACK = 0
    ASYN_RNR = 1
    ASYN_NAK = 2
    ASYN_RESERVED = 3

cdef struct ASpec:
    int off        # from the BTH start; -1: the opcode has no such field there
    int n
    int shift
    int need       # bytes from the BTH start that hold the whole header
    uint64_t mask

cdef int A_VALID[256]
cdef int A_CLS[256]
cdef int A_POS[256]
cdef int A_KIND[256]
cdef int A_SEQ[256]
cdef int A_KEYNEED[256]   # bytes from the BTH start holding the first ETH (0: no key fields)
cdef ASpec A_DMALEN[256]  # RETH DMA length when RETH is not the first ETH
cdef ASpec A_SYN[256]     # AETH syndrome / MSN when AETH is not the first ETH
cdef ASpec A_MSN[256]
cdef int A_SYN_RULE[256]  # by syndrome byte: ASYN_*, and the value bits
cdef int A_SYN_VALUE[256]
DEF A_MAX_PIECES = 4
cdef int A_NPIECE[8]      # by L3 kind: the flow key's address pieces (flowrules.ADDR_PIECES)
cdef int A_POFF[8][A_MAX_PIECES]
cdef int A_PLEN[8][A_MAX_PIECES]
cdef int A_SPAN_B[8]      # by L3 kind: bytes from the L3 start the key needs (0: no key)
cdef int A_L3LEN_F[8]     # by L3 kind: the L3 length field (F_*, or L_* with A_L3LEN_LRH),
cdef int A_L3LEN_X[8]     # what it leaves out and its unit in bytes
cdef int A_L3LEN_U[8]
cdef bint A_L3LEN_LRH[8]
# By L3 kind, flowrules.CE_MARKS and BECN_FIELDS: the field (F_*, -1: none), read at the BTH
# or the L3 start, its mask and the marked value.
cdef struct AMark:
    int f
    bint at_bth
    int mask
    int value
cdef AMark A_CE[8]
cdef AMark A_BECN[8]
cdef int A_FIRST_BAD = 0     # walk statuses below it (and above OK) are "not RoCE"
cdef int64_t A_ATOMIC_BYTES = 0
cdef uint32_t A_PSN_MASK = 0
cdef bint A_CONFIGURED = False
cdef int A_DEFAULT_MTU = 0
cdef int A_IB_MTUS[5]
cdef int A_MAX_OPEN = 0
cdef int A_REORDER_HOLD = 0
cdef int64_t A_MAX_READ_PSNS = 0
cdef int A_KIND_WRITE = -1, A_KIND_WRITE_IMM = -1, A_KIND_READ = -1, A_KIND_READ_RESP = -1
# Event kinds by their row in flowrules.EVENTS.
cdef dict A_EV_INDEX = {}   # name -> row
cdef int A_EV_SEV[A_NEVENTS]
cdef int A_EV_CTR[A_NEVENTS]  # the flow counter the event bumps, -1: none
cdef list A_EV_TEXT = []
cdef list A_EV_BURST = []
cdef list A_SIDE = []       # "" for the request tracker, "response " for the response one
# Flow counters by their row in flowrules.COUNTERS: those the engine bumps itself.
cdef int A_NC = 0
cdef int CT_PACKETS, CT_BYTES, CT_PAYLOAD, CT_UNIQUE, CT_REQ_PAYLOAD, CT_RSP_PAYLOAD
cdef int CT_ACKS, CT_ATOMIC_ACKS, CT_TRUNCATED, CT_RETX_SELECTIVE, CT_RETX_GO_BACK
cdef list A_KIND_NAMES = []
cdef list A_NAK_EVENT = []  # by NAK code: its event kind
cdef list A_NAK_TEXT = []   # by NAK code: its name
cdef int A_SACK_CODE = -1   # flowrules.is_selective_nak: the NAK code and how far ahead
cdef int64_t A_SACK_AHEAD = 0
cdef list A_RNR_TEXT = []   # by timer code: "0.64"
cdef object A_EVENT = tuple  # flowmodel.Event


cdef inline bint a_marked(const uint8_t *p, AMark *m, int l3_off, int bth) noexcept nogil:
    """flowref._marked: whether the frame carries the mark ``m`` (a CE_MARKS / BECN_FIELDS
    row)."""
    if m.f < 0:
        return False
    return (<int>rd(p, bth if m.at_bth else l3_off, m.f) & m.mask) == m.value


cdef void _a_spec(ASpec *s, object spec):
    if spec is None:
        s.off = -1
        s.n = s.shift = s.need = 0
        s.mask = 0
    else:
        s.off, s.n, s.shift, s.mask, s.need = spec


def configure_flows(dict cfg):
    """Tables and texts for FlowEngine, from roce.analysis.cflows.engine_config()."""
    global A_CONFIGURED, A_DEFAULT_MTU, A_MAX_OPEN, A_MAX_READ_PSNS, A_KIND_WRITE, A_REORDER_HOLD
    global A_KIND_READ_RESP
    global A_KIND_WRITE_IMM, A_KIND_READ, A_FIRST_BAD, A_ATOMIC_BYTES
    global A_PSN_MASK, A_NC, A_EV_INDEX, A_EV_TEXT, A_EV_BURST, A_SIDE, A_KIND_NAMES
    global A_NAK_EVENT, A_NAK_TEXT, A_RNR_TEXT, A_EVENT, A_SACK_CODE, A_SACK_AHEAD
    global CT_PACKETS, CT_BYTES, CT_PAYLOAD, CT_UNIQUE, CT_REQ_PAYLOAD, CT_RSP_PAYLOAD
    global CT_ACKS, CT_ATOMIC_ACKS, CT_TRUNCATED, CT_RETX_SELECTIVE, CT_RETX_GO_BACK
    cdef int code, k
    # The enums above are written out for C: check they still are the rules' numbering.
    if (tuple(cfg["classes"]) != (AC_DATA, AC_READ, AC_ATOMIC, AC_ONLYREQ, AC_READ_RESP,
                                  AC_ACK, AC_ATOMIC_ACK, AC_CNP)
            or tuple(cfg["positions"]) != (AP_FIRST, AP_MIDDLE, AP_LAST, AP_ONLY)
            or tuple(cfg["psn_events"]) != (AEV_FIRST, AEV_IN_ORDER, AEV_GAP, AEV_LATE,
                                            AEV_DUPLICATE)
            or tuple(cfg["syndrome_rules"]) != (ASYN_ACK, ASYN_RNR, ASYN_NAK, ASYN_RESERVED)):
        raise ValueError("flow engine: class, position, PSN event or syndrome rule numbering "
                         "differs from roce.analysis.flowrules / roce.psn")
    if len(cfg["kind_names"]) != A_NKINDS:
        raise ValueError("flow engine: %d message kinds, built for %d"
                         % (len(cfg["kind_names"]), A_NKINDS))
    if len(cfg["nak_texts"]) != 32 or len(cfg["rnr_texts"]) != 32:
        raise ValueError("flow engine: built for 5-bit NAK and RNR timer codes")
    if len(cfg["events"]) > A_NEVENTS or len(cfg["counters"]) > A_NCOUNTERS:
        raise ValueError("flow engine: more event kinds or counters than it was built for")
    for code in range(256):
        A_VALID[code] = 0
        A_KEYNEED[code] = 0
        _a_spec(&A_DMALEN[code], None)
        _a_spec(&A_SYN[code], None)
        _a_spec(&A_MSN[code], None)
    for code, (cls, pos, kind, seq) in cfg["opinfo"].items():
        A_VALID[code] = 1
        A_CLS[code], A_POS[code], A_KIND[code], A_SEQ[code] = cls, pos, kind, seq
    for code, need in cfg["key_need"].items():
        A_KEYNEED[code] = need
    for code, spec in cfg["dmalen_later"].items():
        _a_spec(&A_DMALEN[code], spec)
    for code, (syn, msn) in cfg["aeth_later"].items():
        _a_spec(&A_SYN[code], syn)
        _a_spec(&A_MSN[code], msn)
    for code, (rule, value) in enumerate(cfg["syndromes"]):
        A_SYN_RULE[code], A_SYN_VALUE[code] = rule, value
    for k in range(8):
        A_NPIECE[k] = A_SPAN_B[k] = 0
        A_L3LEN_F[k] = A_CE[k].f = A_BECN[k].f = -1
        A_L3LEN_X[k] = 0
        A_L3LEN_U[k] = 1
        A_L3LEN_LRH[k] = False
    if any(not 0 <= k < 8 for k in cfg["pieces"]):
        raise ValueError("flow engine: an L3 kind outside 0..7")
    for k, pieces in cfg["pieces"].items():
        if len(pieces) > A_MAX_PIECES or sum(n for _, n in pieces) > A_MAX_ADDR:
            raise ValueError("flow engine: L3 kind %d's address is too long" % k)
        A_NPIECE[k] = len(pieces)
        for j, (off, n) in enumerate(pieces):
            A_POFF[k][j], A_PLEN[k][j] = off, n
            A_SPAN_B[k] = max(A_SPAN_B[k], off + n)
    if any(not 0 <= k < 8 for k in (*cfg["l3_len"], *cfg["ce_marks"], *cfg["becn_fields"])):
        raise ValueError("flow engine: an L3 kind outside 0..7")
    for k, (f, extra, unit, lrh) in cfg["l3_len"].items():
        A_L3LEN_F[k], A_L3LEN_X[k], A_L3LEN_U[k], A_L3LEN_LRH[k] = f, extra, unit, lrh
    for k, (f, at_bth, mask, value) in cfg["ce_marks"].items():
        A_CE[k].f, A_CE[k].at_bth, A_CE[k].mask, A_CE[k].value = f, at_bth, mask, value
    for k, (f, at_bth, mask, value) in cfg["becn_fields"].items():
        A_BECN[k].f, A_BECN[k].at_bth, A_BECN[k].mask, A_BECN[k].value = f, at_bth, mask, value
    A_FIRST_BAD = cfg["first_bad_status"]
    A_ATOMIC_BYTES = cfg["atomic_bytes"]
    A_PSN_MASK = cfg["psn_mask"]
    A_DEFAULT_MTU = cfg["default_mtu"]
    for k, m in enumerate(cfg["ib_mtus"]):
        A_IB_MTUS[k] = m
    A_MAX_OPEN = cfg["max_open"]
    A_REORDER_HOLD = cfg["reorder_hold"]
    A_MAX_READ_PSNS = cfg["max_read_psns"]
    A_KIND_WRITE, A_KIND_WRITE_IMM = cfg["write_kinds"]
    A_KIND_READ = cfg["read_kind"]
    A_KIND_READ_RESP = cfg["read_response_kind"]
    A_EV_INDEX = {}
    A_EV_TEXT = []
    A_EV_BURST = []
    for k, (name, sev, text, burst, counter) in enumerate(cfg["events"]):
        A_EV_INDEX[name] = k
        A_EV_SEV[k] = sev
        A_EV_CTR[k] = counter
        A_EV_TEXT.append(text)
        A_EV_BURST.append(burst)
    A_SIDE = list(cfg["side_words"])
    ct = {name: k for k, name in enumerate(cfg["counters"])}
    A_NC = len(ct)
    CT_PACKETS, CT_BYTES, CT_PAYLOAD = ct["packets"], ct["bytes"], ct["payload"]
    CT_UNIQUE, CT_REQ_PAYLOAD = ct["unique_payload"], ct["req_payload"]
    CT_RSP_PAYLOAD, CT_ACKS = ct["rsp_payload"], ct["acks"]
    CT_ATOMIC_ACKS, CT_TRUNCATED = ct["atomic_acks"], ct["truncated"]
    CT_RETX_SELECTIVE, CT_RETX_GO_BACK = ct["retx_selective"], ct["retx_go_back"]
    A_KIND_NAMES = list(cfg["kind_names"])
    A_NAK_EVENT = list(cfg["nak_events"])
    A_NAK_TEXT = list(cfg["nak_texts"])
    A_SACK_CODE, A_SACK_AHEAD = cfg["sack"]
    A_RNR_TEXT = list(cfg["rnr_texts"])
    A_EVENT = cfg["event"]
    A_CONFIGURED = True


cdef inline int64_t a_rd(const uint8_t *b, ASpec *s) noexcept nogil:
    return <int64_t>((rd64(b + s.off, s.n) >> s.shift) & s.mask)


cdef struct AHeld:
    # A packet waiting behind a hole (flowref._Msgs.held), ordered by key: its PSN's distance
    # from the first one held (flowref's heap key).
    int32_t key
    uint32_t psn
    int pos, kind
    int64_t plen, dmalen, fn, ts


cdef class AMsgs:
    """Message reassembly state of one direction of one flow (flowref._Msgs)."""

    cdef int kind
    cdef bint has_first
    cdef uint32_t first, lo
    cdef int64_t nbytes, pkts, mtu, dmalen, frame, ts
    cdef list open
    # reassembly in PSN order (flowref._Msgs): waiting packets in key order (a ring of
    # A_REORDER_HOLD + 1, made at the first), the key origin, the highest PSN reassembled
    # and the floor of the holes waited for (-1: none)
    cdef AHeld *held
    cdef int nheld, h0
    cdef uint32_t base
    cdef int64_t hi, floor

    def __cinit__(self):
        self.kind = -1
        self.dmalen = -1
        self.open = []
        self.hi = self.floor = -1

    def __dealloc__(self):
        free(self.held)

    cdef int hold(self, uint32_t psn, int pos, int kind, int64_t plen, int64_t dmalen,
                  int64_t fn, int64_t ts) except -1:
        """Insert in key order; 1 when that PSN is held already (nothing changes)."""
        cdef int cap = A_REORDER_HOLD + 1, i
        cdef int32_t key
        cdef AHeld *e
        if self.held == NULL:
            self.held = <AHeld *>malloc(cap * sizeof(AHeld))
            if self.held == NULL:
                raise MemoryError()
        if self.nheld == 0:
            self.base = psn
            self.h0 = 0
        key = c_psn_diff(psn, self.base)
        i = self.nheld
        while i > 0 and self.held[(self.h0 + i - 1) % cap].key >= key:
            if self.held[(self.h0 + i - 1) % cap].key == key:  # held already (flowref)
                while i < self.nheld:  # put back what moved up
                    self.held[(self.h0 + i) % cap] = self.held[(self.h0 + i + 1) % cap]
                    i += 1
                return 1
            self.held[(self.h0 + i) % cap] = self.held[(self.h0 + i - 1) % cap]
            i -= 1
        e = &self.held[(self.h0 + i) % cap]
        e.key, e.psn, e.pos, e.kind = key, psn, pos, kind
        e.plen, e.dmalen, e.fn, e.ts = plen, dmalen, fn, ts
        self.nheld += 1
        return 0

    cdef AHeld pop(self) noexcept:
        cdef AHeld e = self.held[self.h0]
        self.h0 = (self.h0 + 1) % (A_REORDER_HOLD + 1)
        self.nheld -= 1
        return e


cdef struct ABurst:
    # An open run of retransmissions on one tracker (flowref._RefFlow.bursts).
    bint open
    int64_t first, ts, last, count
    uint32_t lo, hi


cdef class AFlow:
    """Counters of one flow (flowmodel.Flow), read out by roce.analysis.cflows at the end."""

    cdef readonly int id, l3, path
    cdef readonly bytes addr
    cdef readonly int64_t qp, first_ts, last_ts, req_first, rsp_first, rsp_last
    cdef readonly PSNTracker req, rsp
    cdef int64_t c[A_NCOUNTERS]  # flowrules.COUNTERS, in its order
    cdef bint has_pending
    cdef int64_t pend_fn, pend_psn, pend_dmalen, pend_ts
    cdef AMsgs reqmsg, rspmsg
    cdef ABurst burst[3]  # requests, responses, spurious request retransmissions
    cdef int64_t stats[A_NKINDS][4]
    cdef bint has_stats[A_NKINDS]
    cdef int64_t naks[32]
    cdef int64_t rnr[32]
    cdef int64_t ack_msn, nak_psn  # last ACK's MSN, last sequence NAK's PSN, -1 before one
    # flowrules, "acknowledged PSNs": the cumulative acknowledgement (-1: none) and the
    # selective marks, A_SACK_AHEAD bits by PSN % A_SACK_AHEAD, made at the first one
    cdef int64_t acked
    cdef uint8_t *sacks
    cdef list back  # the flows going the other way between the same addresses

    def __cinit__(self):
        self.first_ts = self.last_ts = -1
        self.ack_msn = self.nak_psn = -1
        self.acked = -1
        self.req_first = self.rsp_first = self.rsp_last = -1
        self.reqmsg = AMsgs()
        self.rspmsg = AMsgs()

    def __dealloc__(self):
        free(self.sacks)

    def counters(self):
        """The counters in flowrules.COUNTERS order."""
        return [self.c[k] for k in range(A_NC)]

    def message_stats(self):
        """kind -> [count, bytes, min size, max size]"""
        return {k: [self.stats[k][0], self.stats[k][1], self.stats[k][2], self.stats[k][3]]
                for k in range(A_NKINDS) if self.has_stats[k]}

    def nak_counts(self):
        return {c: self.naks[c] for c in range(32) if self.naks[c]}

    def rnr_counts(self):
        return {c: self.rnr[c] for c in range(32) if self.rnr[c]}


cdef struct ASlot:
    int32_t idx        # -1: empty
    uint32_t qp
    uint8_t l3
    uint8_t alen
    uint8_t addr[A_MAX_ADDR]


cdef inline uint64_t a_hash(uint8_t l3, const uint8_t *addr, int alen, uint32_t qp) noexcept nogil:
    cdef uint64_t h = 1469598103934665603ULL ^ (<uint64_t>qp << 8) ^ l3
    cdef int i
    for i in range(alen):
        h = (h ^ addr[i]) * 1099511628211ULL
    return h ^ (h >> 29)


cdef class FlowEngine:
    """Streaming analyser over raw frames; see roce.analysis.cflows.CompiledAnalyzer."""

    cdef int udp_port
    cdef int64_t ev_cap
    cdef object store
    cdef readonly int64_t frames, not_roce, malformed_unattributed, truncated_unattributed
    cdef readonly int64_t first_ts, last_ts
    cdef readonly list flows, events
    cdef int64_t lines[A_NEVENTS]  # lines made per kind: below the cap each one is kept
    cdef ASlot *slots
    cdef Py_ssize_t cap, used
    cdef dict paths
    cdef dict by_addr  # (l3, src+dst) -> its flows: where a request flow's answers are
    cdef int64_t *mtus
    cdef Py_ssize_t npaths, mtu_cap
    cdef object explain
    cdef bint finished

    def __cinit__(self, int udp_port, store, explain):
        if not A_CONFIGURED:
            raise RuntimeError("FlowEngine: configure_flows() has not run (import "
                               "roce.analysis.cflows)")
        self.udp_port = udp_port
        self.store = store  # flowmodel.EventStore: counts events, keeps the first lines
        self.ev_cap = store.cap
        self.explain = explain
        self.first_ts = self.last_ts = -1
        self.flows = []
        self.events = []
        self.paths = {}
        self.by_addr = {}
        self.cap = 64
        self.slots = <ASlot *>malloc(self.cap * sizeof(ASlot))
        if self.slots == NULL:
            raise MemoryError()
        for i in range(self.cap):
            self.slots[i].idx = -1

    def __dealloc__(self):
        free(self.slots)
        free(self.mtus)

    # -- results ---------------------------------------------------------------------------

    def event_counts(self):
        return dict(self.store.counts)

    def event_lines(self):
        return dict(self.store.lines)

    def path_mtu(self, int path):
        return self.mtus[path]

    # -- input -----------------------------------------------------------------------------

    def feed_frames(self, list datas, ts_ns, caplen, origlen, int linktype):
        """Frames as columns (pcapio.Batch); ``caplen`` None when unknown (plain bytes)."""
        cdef Py_ssize_t i, n = PyList_GET_SIZE(datas)
        cdef object f
        for i in range(n):
            f = <object>PyList_GET_ITEM(datas, i)
            if not PyBytes_Check(f):
                f = bytes(f)
            self._frame(f, <const uint8_t *>PyBytes_AS_STRING(f), PyBytes_GET_SIZE(f),
                        caplen is not None, origlen[i], ts_ns[i], linktype)

    def feed_pcap(self, const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end,
                  bint big_endian, int64_t frac_mul, int linktype, int64_t max_record):
        """Classic pcap records found whole in buf[pos:end], analysed in place.  Returns
        (new pos, status): 0 stopped before an incomplete record (or at end), 1 before a
        record longer than ``max_record``."""
        cdef const uint8_t *p = &buf[0] if buf.shape[0] else NULL
        cdef const uint8_t *q
        cdef uint32_t v[4]
        if pos < 0:
            raise ValueError("feed_pcap: negative position")
        if end > buf.shape[0]:
            end = buf.shape[0]
        while end - pos >= 16:
            q = p + pos
            pcap_record_header(q, big_endian, v)
            if v[2] > max_record:
                return pos, 1
            if end - pos - 16 < v[2]:
                break
            self._frame(None, q + 16, v[2], True, v[3],
                        <int64_t>v[0] * 1000000000 + <int64_t>v[1] * frac_mul, linktype)
            pos += 16 + v[2]
        return pos, 0

    # -- one frame (flowref.Analyzer._feed_batch and _bad_frame) ---------------------------

    cdef int _frame(self, object obj, const uint8_t *p, Py_ssize_t n, bint have_caps,
                    int64_t origlen, int64_t ts, int linktype) except -1:
        cdef WalkResult w
        cdef int64_t fn
        cdef int op, st, bth, a, b, k
        cdef bint ce, becn
        cdef int64_t plen, k0 = 0, k1 = 0, k2 = 0
        cdef uint32_t psn, qp
        cdef bint icrc_ok, snapped = False, bad = False, truncated = False
        cdef object text = None
        cdef const uint8_t *bp
        cdef uint8_t key[A_MAX_ADDR]
        cdef AFlow f
        self.frames += 1
        fn = self.frames
        if self.first_ts < 0:
            self.first_ts = ts
        self.last_ts = ts
        st = do_walk(p, n, linktype, self.udp_port, &w)
        bth = w.bth_off
        if st == S_OK:
            op = w.opcode
            bp = p + bth
            icrc_ok = bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, bth,
                                       w.icrc_off)) == stored(p, w.icrc_off)
            plen = w.pad_off - w.payload_off
            if K_COUNT[op] > 0:
                k0 = (rd64(bp + K_OFF[op][0], K_N[op][0]) >> K_SHIFT[op][0]) & K_MASK[op][0]
            if K_COUNT[op] > 1:
                k1 = (rd64(bp + K_OFF[op][1], K_N[op][1]) >> K_SHIFT[op][1]) & K_MASK[op][1]
            if K_COUNT[op] > 2:
                k2 = (rd64(bp + K_OFF[op][2], K_N[op][2]) >> K_SHIFT[op][2]) & K_MASK[op][2]
        elif st < A_FIRST_BAD:
            self.not_roce += 1
            return 0
        else:
            snapped = have_caps and n < origlen and (st == S_TRUNC or st == S_L3_LENGTH)
            if not (w.l3_kind >= 0 and w.l3_kind < 8 and A_SPAN_B[w.l3_kind] > 0
                    and w.l3_off >= 0 and bth >= 0 and n >= bth + SZ_BTH
                    and n >= w.l3_off + A_SPAN_B[w.l3_kind]
                    and rd(p, bth, F_BTH_TVER) == 0
                    and A_VALID[p[bth + F_OFF[F_BTH_OPCODE]]]):
                if snapped:
                    self.truncated_unattributed += 1
                else:
                    self.malformed_unattributed += 1
                    # the text only for an event that is kept: a capture may hold millions
                    # of alike malformed frames (zero-length records)
                    self._event(fn, ts, "malformed", None,
                                (self._malformed(obj, p, n, linktype),)
                                if self._stored("malformed", fn) else None)
                return 0
            op = p[bth + F_OFF[F_BTH_OPCODE]]
            bp = p + bth
            icrc_ok = True  # not checked: it cannot be computed over a partial frame
            if A_KEYNEED[op]:
                if n >= bth + A_KEYNEED[op]:
                    if K_COUNT[op] > 0:
                        k0 = (rd64(bp + K_OFF[op][0], K_N[op][0]) >> K_SHIFT[op][0]) & K_MASK[op][0]
                    if K_COUNT[op] > 1:
                        k1 = (rd64(bp + K_OFF[op][1], K_N[op][1]) >> K_SHIFT[op][1]) & K_MASK[op][1]
                    if K_COUNT[op] > 2:
                        k2 = (rd64(bp + K_OFF[op][2], K_N[op][2]) >> K_SHIFT[op][2]) & K_MASK[op][2]
                else:
                    k0 = k1 = k2 = -1  # unknown: a READ's length, an ACK's syndrome
            plen = 0
            k = A_L3LEN_F[w.l3_kind]
            if snapped and w.payload_off >= 0 and st == S_L3_LENGTH and k >= 0:
                # All headers were captured: the L3 length says how much payload there was.
                plen = (<int64_t>w.l3_off + A_L3LEN_X[w.l3_kind]
                        + <int64_t>(lrd(p + w.l3_off, k) if A_L3LEN_LRH[w.l3_kind]
                                    else rd(p, w.l3_off, k)) * A_L3LEN_U[w.l3_kind]
                        - 4 - <int64_t>rd(p, bth, F_BTH_PADCNT) - w.payload_off)
                if plen < 0:
                    plen = 0
            if snapped:
                truncated = True
            else:
                bad = True
                text = self._malformed(obj, p, n, linktype)
        ce = a_marked(p, &A_CE[w.l3_kind], w.l3_off, bth)
        becn = a_marked(p, &A_BECN[w.l3_kind], w.l3_off, bth)
        qp = rd(p, bth, F_BTH_DESTQP)
        psn = rd(p, bth, F_BTH_PSN)
        if A_DMALEN[op].off >= 0:
            k2 = a_rd(bp, &A_DMALEN[op]) if n >= bth + A_DMALEN[op].need else -1
        elif A_SYN[op].off >= 0:
            if n >= bth + A_SYN[op].need:
                k0 = a_rd(bp, &A_SYN[op])
                k1 = a_rd(bp, &A_MSN[op])
            else:
                k0 = k1 = -1
        if A_NPIECE[w.l3_kind] == 1:  # the addresses are one slice (IP, GRH)
            f = self._flow(w.l3_kind, p + w.l3_off + A_POFF[w.l3_kind][0], A_PLEN[w.l3_kind][0],
                           qp)
        else:  # native InfiniBand: LIDs (and GIDs) gathered
            a = 0
            for k in range(A_NPIECE[w.l3_kind]):
                memcpy(key + a, p + w.l3_off + A_POFF[w.l3_kind][k], A_PLEN[w.l3_kind][k])
                a += A_PLEN[w.l3_kind][k]
            f = self._flow(w.l3_kind, key, a, qp)
        if f.first_ts < 0:
            f.first_ts = ts
        f.last_ts = ts
        self._packet(f, obj, p, n, linktype, &w, fn, ts, op, psn, plen, origlen, ce, becn,
                     icrc_ok,
                     k0, k1, k2, bad, truncated, text)
        return 0

    cdef object _malformed(self, object obj, const uint8_t *p, Py_ssize_t n, int linktype):
        if obj is None:
            obj = PyBytes_FromStringAndSize(<const char *>p, n)
        return self.explain(obj, linktype, self.udp_port)

    cdef AFlow _flow(self, int l3, const uint8_t *addr, int alen, uint32_t qp):
        cdef uint64_t h = a_hash(l3, addr, alen, qp)
        cdef Py_ssize_t mask = self.cap - 1, i = h & mask
        cdef ASlot *s
        while True:
            s = &self.slots[i]
            if s.idx < 0:
                break
            if s.qp == qp and s.l3 == l3 and s.alen == alen and \
                    memcmp(s.addr, addr, alen) == 0:
                return <AFlow>PyList_GET_ITEM(self.flows, s.idx)
            i = (i + 1) & mask
        return self._new_flow(l3, addr, alen, qp)

    cdef AFlow _new_flow(self, int l3, const uint8_t *addr, int alen, uint32_t qp):
        cdef AFlow f = AFlow()
        cdef bytes key = PyBytes_FromStringAndSize(<const char *>addr, alen)
        cdef int half = alen // 2
        cdef bytes rev = key[half:] + key[:half]
        cdef object pkey = (l3, min(key, rev))
        cdef int64_t *m
        path = self.paths.get(pkey)
        if path is None:
            if self.npaths == self.mtu_cap:
                self.mtu_cap = self.mtu_cap * 2 if self.mtu_cap else 16
                m = <int64_t *>realloc(self.mtus, self.mtu_cap * sizeof(int64_t))
                if m == NULL:
                    raise MemoryError()
                self.mtus = m
            self.mtus[self.npaths] = 0
            path = self.paths[pkey] = self.npaths
            self.npaths += 1
        f.id = len(self.flows)
        f.l3 = l3
        f.addr = key
        f.qp = qp
        f.path = path
        self.flows.append(f)
        self.by_addr.setdefault((l3, key), []).append(f)
        f.back = self.by_addr.setdefault((l3, rev), [])
        self._insert(f.id, l3, addr, alen, qp)
        return f

    cdef int _insert(self, int32_t idx, int l3, const uint8_t *addr, int alen,
                     uint32_t qp) except -1:
        cdef ASlot *old
        cdef Py_ssize_t i, oldcap, mask
        cdef ASlot *s
        if (self.used + 1) * 2 > self.cap:
            old, oldcap = self.slots, self.cap
            self.slots = <ASlot *>malloc(oldcap * 2 * sizeof(ASlot))
            if self.slots == NULL:
                self.slots = old
                raise MemoryError()
            self.cap = oldcap * 2
            for i in range(self.cap):
                self.slots[i].idx = -1
            self.used = 0
            for i in range(oldcap):
                if old[i].idx >= 0:
                    self._insert(old[i].idx, old[i].l3, old[i].addr, old[i].alen, old[i].qp)
            free(old)
        mask = self.cap - 1
        i = a_hash(l3, addr, alen, qp) & mask
        while self.slots[i].idx >= 0:
            i = (i + 1) & mask
        s = &self.slots[i]
        s.idx = idx
        s.qp = qp
        s.l3 = l3
        s.alen = alen
        memcpy(s.addr, addr, alen)
        self.used += 1
        return 0

    cdef int _packet(self, AFlow f, object obj, const uint8_t *p, Py_ssize_t n, int linktype,
                     WalkResult *w, int64_t fn, int64_t ts, int op, uint32_t psn, int64_t plen,
                     int64_t origlen, bint ce, bint becn, bint icrc_ok, int64_t k0, int64_t k1,
                     int64_t k2, bint bad, bint truncated, object text) except -1:
        cdef int cls = A_CLS[op], pos = A_POS[op], kind = A_KIND[op], ev, rule, v
        cdef PSNTracker tr
        cdef int32_t d
        if bad:  # malformed: sequenced, but no part of message reassembly
            self._event(fn, ts, "malformed", f, (text,))
        elif truncated:
            f.c[CT_TRUNCATED] += 1
        f.c[CT_PACKETS] += 1
        f.c[CT_BYTES] += origlen
        f.c[CT_PAYLOAD] += plen
        if ce:  # flowrules "congestion marks": IP ECN CE, native InfiniBand's FECN
            self._event(fn, ts, "ecn_ce", f, ())
        if becn and cls != AC_CNP:  # a CNP is counted as one below
            self._event(fn, ts, "becn", f, ())
        if not icrc_ok:
            if self._stored("bad_icrc", fn):
                self._event(fn, ts, "bad_icrc", f, (
                    stored(p, w.icrc_off),
                    bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off,
                                     w.icrc_off))))
            else:
                self._event(fn, ts, "bad_icrc", f, None)
        if (w.l3_kind == L3K_LRH or w.l3_kind == L3K_LRH_GRH) and w.status == S_OK:
            self._vcrc(f, p, n, w, fn, ts)
        if cls <= AC_ONLYREQ:  # a request
            f.c[CT_REQ_PAYLOAD] += plen
            if not A_SEQ[op]:  # UD: counted, not sequenced
                f.c[CT_UNIQUE] += plen
                self._complete(f, kind, plen, -1, fn, ts)
                return 0
            if f.req_first < 0:
                f.req_first = psn
            if f.has_pending:
                self._resolve_read(f, psn, True)
            if cls == AC_READ and k2 >= 0:
                # Its PSN count depends on the MTU: decide when the next request comes.
                f.has_pending = True
                f.pend_fn, f.pend_psn, f.pend_dmalen, f.pend_ts = fn, psn, k2, ts
                return 0
            ev = self._feed_req(f, psn, 1, fn, ts, cls == AC_READ)
            if ev == AEV_DUPLICATE:
                return 0
            f.c[CT_UNIQUE] += plen
            if bad:
                return 0
            if cls == AC_DATA:
                self._reassemble(f, f.reqmsg, f.req, pos, kind, psn, plen, k2, fn, ts)
            elif cls == AC_READ:  # a READ whose RETH was not captured
                self._complete(f, kind, 0, -1, fn, ts)
            else:
                self._complete(f, kind, A_ATOMIC_BYTES if cls == AC_ATOMIC else plen, -1, fn, ts)
        elif cls == AC_ACK:
            self._note_rsp_psn(f, psn)
            if k0 < 0:  # AETH not captured
                return 0
            rule = A_SYN_RULE[k0]
            v = A_SYN_VALUE[k0]
            if rule == ASYN_ACK:
                f.c[CT_ACKS] += 1
                f.ack_msn = k1
                self._ack_to(f, (psn + 1) & A_PSN_MASK)
            elif rule == ASYN_RNR:
                f.rnr[v] += 1
                self._event(fn, ts, "rnr_nak", f, (A_RNR_TEXT[v], psn))
            elif rule == ASYN_NAK:
                selective = (v == A_SACK_CODE
                             and (f.ack_msn >= 0 and k1 != f.ack_msn or psn == f.nak_psn)
                             and 0 < ((k1 - psn) & A_PSN_MASK) <= A_SACK_AHEAD)
                if v == A_SACK_CODE:
                    f.nak_psn = psn
                    self._ack_to(f, psn)
                    self._nak_below_start(f, psn)
                if selective:
                    self._sack(f, <uint32_t>k1)
                    self._event(fn, ts, "selective_nak", f, (psn, k1))
                    return 0
                f.naks[v] += 1
                self._event(fn, ts, A_NAK_EVENT[v], f, (A_NAK_TEXT[v], k1, psn))
            else:
                self._event(fn, ts, "reserved_syndrome", f, (k0,))
        elif cls == AC_READ_RESP or cls == AC_ATOMIC_ACK:
            self._note_rsp_psn(f, psn)
            f.c[CT_RSP_PAYLOAD] += plen
            if cls == AC_ATOMIC_ACK:
                f.c[CT_ATOMIC_ACKS] += 1
            tr = f.rsp
            if tr is None:
                tr = f.rsp = PSNTracker()
            elif tr.started and (pos == AP_FIRST or pos == AP_ONLY):
                # A new response may skip PSNs used by requests without a data response.
                d = c_psn_diff(psn, tr.next)
                if d > 0:
                    if psn < tr.next:
                        tr.wraps += 1
                    tr.next = psn
            ev = self._feed(f, tr, psn, 1, fn, ts, 1)
            if ev == AEV_DUPLICATE:
                return 0
            f.c[CT_UNIQUE] += plen
            if cls == AC_ATOMIC_ACK or bad:
                return 0
            self._reassemble(f, f.rspmsg, tr, pos, kind, psn, plen, -1, fn, ts)
        else:  # CNP
            self._event(fn, ts, "cnp", f, ())
        return 0

    cdef int _vcrc(self, AFlow f, const uint8_t *p, Py_ssize_t n, WalkResult *w, int64_t fn,
                   int64_t ts) except -1:
        """Native InfiniBand: the VCRC after the ICRC, when captured (flowref._vcrc)."""
        cdef uint16_t calc, got
        if n < w.l4_end + IB_VCRC:
            return 0
        if not IB_VCRC_READY:
            raise RuntimeError("FlowEngine: the VCRC table is not configured (import "
                               "roce.families.ib.crc)")
        calc = vcrc_raw(p, w.l4_end)
        got = (<uint16_t>p[w.l4_end] << 8) | p[w.l4_end + 1]
        if calc != got:
            self._event(fn, ts, "bad_vcrc", f, (got, calc))
        return 0

    # -- PSN sequencing --------------------------------------------------------------------

    cdef int _feed_req(self, AFlow f, uint32_t psn, int count, int64_t fn, int64_t ts,
                       bint read) except -1:
        cdef PSNTracker t = f.req
        if t is None:
            t = f.req = PSNTracker()
        elif t.early and c_psn_diff(psn, t.first) < 0 and self._acknowledged(f, psn):
            t.early = 0  # flowrules, "request PSNs": acknowledged, no late first arrival
        cdef int ev = self._feed(f, t, psn, count, fn, ts, 0)
        cdef ABurst *b = &f.burst[2]
        if ev == AEV_LATE:
            f.req_first = t.first  # a late first arrival moves the start back
        if ev == AEV_DUPLICATE and not read and self._acknowledged(f, psn):
            if b.open:  # flowrules, "spurious retransmissions": runs fold
                if psn == ((b.hi + 1) & A_PSN_MASK):
                    b.last = fn
                    b.hi = psn
                    b.count += 1
                    return ev
                self._close_spurious(f)
            b.open = True
            b.first = b.last = fn
            b.ts = ts
            b.lo = b.hi = psn
            b.count = 1
        elif b.open:
            self._close_spurious(f)
        return ev

    cdef int _close_spurious(self, AFlow f) except -1:
        cdef ABurst *b = &f.burst[2]
        cdef object args = None
        b.open = False
        if self._stored("spurious_retransmission", b.first):
            args = (b.lo,)
            if b.count > 1:
                args = (b.lo, b.hi, b.count)
        self._event(b.first, b.ts, "spurious_retransmission", f, args, b.count,
                    b.last if b.count > 1 else 0)
        return 0

    # -- acknowledged PSNs (flowref._ack_to, _sack, _acknowledged) ------------------------

    cdef void _ack_to(self, AFlow f, uint32_t psn) noexcept:
        cdef int32_t d
        cdef uint32_t q, i
        if f.acked >= 0:
            d = c_psn_diff(psn, <uint32_t>f.acked)
            if d <= 0:
                return
            if f.sacks != NULL:
                if d >= A_SACK_AHEAD:
                    memset(f.sacks, 0, A_SACK_AHEAD // 8)
                else:
                    for i in range(<uint32_t>d):
                        q = (<uint32_t>f.acked + i) & (A_SACK_AHEAD - 1)
                        f.sacks[q >> 3] &= ~(1 << (q & 7))
        f.acked = psn

    cdef int _nak_below_start(self, AFlow f, uint32_t psn) except -1:
        """flowref._nak_below_start: a sequence NAK's ePSN below the start of the flow it
        answers moves that start back."""
        cdef AFlow c, x = None
        cdef PSNTracker t
        cdef int32_t d
        for c in f.back:
            t = c.req
            if t is not None and t.early:
                d = c_psn_diff(t.first, psn)
                if 0 < d and <uint32_t>d <= t.early:
                    if x is not None:
                        return 0  # two candidates: ambiguous
                    x = c
        if x is not None and x.req.start_at(psn):
            x.req_first = psn
        return 0

    cdef int _sack(self, AFlow f, uint32_t psn) except -1:
        cdef int32_t d = c_psn_diff(psn, <uint32_t>f.acked)
        cdef uint32_t q
        if 0 < d < A_SACK_AHEAD:
            if f.sacks == NULL:
                f.sacks = <uint8_t *>malloc(A_SACK_AHEAD // 8)
                if f.sacks == NULL:
                    raise MemoryError()
                memset(f.sacks, 0, A_SACK_AHEAD // 8)
            q = psn & (A_SACK_AHEAD - 1)
            f.sacks[q >> 3] |= 1 << (q & 7)
        return 0

    cdef bint _acknowledged(self, AFlow x, uint32_t psn) except -1:
        """Had the flow answering x's requests acknowledged psn?"""
        cdef AFlow c, y = None
        cdef int32_t d
        cdef uint32_t q
        for c in x.back:
            if c.acked >= 0 and c_psn_diff(<uint32_t>c.acked, <uint32_t>x.req_first) >= 0 \
                    and c_psn_diff(x.req.next, <uint32_t>c.acked) >= 0:
                if y is not None:
                    return False  # two candidates: ambiguous
                y = c
        if y is None:
            return False
        d = c_psn_diff(psn, <uint32_t>y.acked)
        if d < 0:
            return True
        q = psn & (A_SACK_AHEAD - 1)
        return d < A_SACK_AHEAD and y.sacks != NULL and (y.sacks[q >> 3] >> (q & 7)) & 1

    cdef int _feed(self, AFlow f, PSNTracker t, uint32_t psn, int count, int64_t fn,
                   int64_t ts, int side) except -1:
        """Sequence one packet on tracker ``t`` (``side`` 0 requests, 1 responses); a
        retransmission opens or extends that tracker's burst, anything else ends it."""
        cdef uint32_t exp = t.next
        cdef bint started = t.started
        cdef int ev = t.feed(psn, count)
        cdef ABurst *b = &f.burst[side]
        if ev == AEV_DUPLICATE:
            if b.open:
                if psn == ((b.hi + 1) & A_PSN_MASK):
                    b.last = fn
                    b.hi = psn
                    b.count += 1
                    return ev
                self._close_burst(f, side)
            b.open = True
            b.first = b.last = fn
            b.ts = ts
            b.lo = b.hi = psn
            b.count = 1
            return ev
        if b.open:
            self._close_burst(f, side)
        if ev > AEV_IN_ORDER and started:
            if ev == AEV_GAP:
                if self._stored("gap", fn):
                    self._event(fn, ts, "gap", f, (A_SIDE[side], exp, psn,
                                                   c_psn_diff(psn, exp)))
                else:
                    self._event(fn, ts, "gap", f, None)
            elif ev == AEV_LATE:
                if self._stored("out_of_order", fn):
                    self._event(fn, ts, "out_of_order", f, (A_SIDE[side], psn))
                else:
                    self._event(fn, ts, "out_of_order", f, None)
        return ev

    cdef int _close_burst(self, AFlow f, int side) except -1:
        cdef ABurst *b = &f.burst[side]
        cdef object args = None
        b.open = False
        if b.count == 1:  # flowrules, "retransmission bursts"
            f.c[CT_RETX_SELECTIVE] += 1
        else:
            f.c[CT_RETX_GO_BACK] += b.count
        if self._stored("retransmission", b.first):
            args = ((A_SIDE[side], b.lo) if b.count == 1
                    else (A_SIDE[side], b.lo, b.hi, b.count))
        self._event(b.first, b.ts, "retransmission", f, args, b.count,
                    b.last if b.count > 1 else 0)
        return 0

    cdef int _resolve_read(self, AFlow f, uint32_t next_psn, bint have_next) except -1:
        """Sequence the pending READ now that the next request's PSN (or the end) is known."""
        cdef int64_t fn = f.pend_fn, dmalen = f.pend_dmalen, ts = f.pend_ts
        cdef uint32_t psn = <uint32_t>f.pend_psn
        cdef int64_t mtu = self.mtus[f.path], count, c, m
        cdef int32_t d
        cdef int k
        f.has_pending = False
        m = mtu if mtu else A_DEFAULT_MTU
        count = (dmalen + m - 1) // m
        if count < 1:
            count = 1
        if not mtu and have_next:
            d = c_psn_diff(next_psn, psn)
            if d > 0:
                for k in range(5):
                    c = (dmalen + A_IB_MTUS[k] - 1) // A_IB_MTUS[k]
                    if (c if c > 1 else 1) == d:
                        count = d
                        break
        if count > A_MAX_READ_PSNS:
            count = A_MAX_READ_PSNS
        if self._feed_req(f, psn, <int>count, fn, ts, True) != AEV_DUPLICATE:
            self._complete(f, A_KIND_READ, dmalen, -1, fn, ts)
        return 0

    cdef inline void _note_rsp_psn(self, AFlow f, uint32_t psn) noexcept:
        if f.rsp_first < 0:
            f.rsp_first = psn
        f.rsp_last = psn

    # -- message reassembly ----------------------------------------------------------------

    cdef inline bint _is_write(self, int kind) noexcept:
        return kind == A_KIND_WRITE or kind == A_KIND_WRITE_IMM

    cdef int _reassemble(self, AFlow f, AMsgs st, PSNTracker t, int pos, int kind,
                         uint32_t psn, int64_t plen, int64_t dmalen, int64_t fn,
                         int64_t ts) except -1:
        """flowref._reassemble: in PSN order, a packet with a PSN missing below it waits."""
        cdef AHeld e
        if t.nholes and t.missing_below(psn, st.floor):
            if st.hold(psn, pos, kind, plen, dmalen, fn, ts):
                return 0  # held already
            if st.nheld <= A_REORDER_HOLD:
                return 0
            e = st.pop()
            st.floor = e.psn  # give up on what is missing below the oldest waiting packet
            self._place_one(f, st, e.pos, e.kind, e.psn, e.plen, e.dmalen, e.fn, e.ts)
        else:
            self._place_one(f, st, pos, kind, psn, plen, dmalen, fn, ts)
        while st.nheld:
            if t.missing_below(st.held[st.h0].psn, st.floor):
                return 0
            e = st.pop()
            self._place_one(f, st, e.pos, e.kind, e.psn, e.plen, e.dmalen, e.fn, e.ts)
        return 0

    cdef int _place_one(self, AFlow f, AMsgs st, int pos, int kind, uint32_t psn,
                        int64_t plen, int64_t dmalen, int64_t fn, int64_t ts) except -1:
        """flowref._place: past every PSN reassembled it advances, else it fills a hole."""
        if st.hi < 0 or c_psn_diff(psn, <uint32_t>st.hi) > 0:
            if pos == AP_FIRST and kind == A_KIND_READ_RESP and st.kind == A_KIND_READ_RESP \
                    and st.has_first and psn == ((<uint32_t>st.hi + 1) & A_PSN_MASK):
                pos = AP_MIDDLE  # a READ resumed (flowref._place)
            st.hi = psn
            return self._advance(f, st, pos, kind, psn, plen, dmalen, fn, ts)
        return self._late(f, st, pos, kind, psn, plen, dmalen, fn, ts)

    cdef int _release(self, AFlow f, AMsgs st) except -1:
        cdef AHeld e
        while st.nheld:
            e = st.pop()
            self._place_one(f, st, e.pos, e.kind, e.psn, e.plen, e.dmalen, e.fn, e.ts)
        return 0

    cdef int _advance(self, AFlow f, AMsgs st, int pos, int kind, uint32_t psn, int64_t plen,
                      int64_t dmalen, int64_t fn, int64_t ts) except -1:
        """A packet that advanced the sequence (in order, first, or after a gap)."""
        cdef int64_t size
        if ((pos == AP_FIRST or pos == AP_ONLY) and self._is_write(kind)
                and st.kind >= 0 and self._is_write(st.kind) and st.has_first and st.mtu > 0
                and dmalen == st.dmalen - c_psn_diff(psn, st.first) * st.mtu
                and (pos == AP_FIRST or dmalen == plen)):
            pos = AP_MIDDLE if pos == AP_FIRST else AP_LAST  # flowrules: selective repeat WRITE
        if pos == AP_FIRST or pos == AP_MIDDLE:
            if plen > self.mtus[f.path]:
                self.mtus[f.path] = plen
        if pos == AP_MIDDLE:
            if st.kind < 0:  # a message whose First was not seen
                self._start(st, kind, False, psn, psn, plen, -1, fn, ts)
            else:
                st.nbytes += plen
                st.pkts += 1
            return 0
        if pos == AP_FIRST:
            if st.kind >= 0:
                self._abandon(f, st, False, 0, -1)
            self._start(st, kind, True, psn, psn, plen, dmalen if self._is_write(kind) else -1,
                        fn, ts)
            return 0
        if pos == AP_ONLY:
            if st.kind >= 0:
                self._abandon(f, st, False, 0, -1)
            self._complete(f, kind, plen, dmalen if self._is_write(kind) else -1, fn, ts)
            return 0
        # Last
        if st.kind < 0:
            self._start(st, kind, False, psn, psn, 0, -1, fn, ts)
            st.pkts = 0
        st.nbytes += plen
        st.pkts += 1
        if not st.has_first:  # a tail without head: wait for a late First
            self._abandon(f, st, True, psn, kind)
            return 0
        size = st.nbytes + self._lost(st.first, psn, st.pkts,
                                      st.mtu if st.mtu else self.mtus[f.path])
        st.kind = -1
        self._complete(f, kind, size, st.dmalen, st.frame, st.ts)
        return 0

    cdef inline int64_t _lost(self, uint32_t first, uint32_t last, int64_t pkts,
                              int64_t mtu) noexcept:
        """Bytes of the packets between First and Last that were not seen."""
        cdef int64_t missing = <int64_t>c_psn_diff(last, first) + 1 - pkts
        return missing * mtu if missing > 0 else 0

    cdef inline void _start(self, AMsgs st, int kind, bint has_first, uint32_t first,
                            uint32_t psn, int64_t plen, int64_t dmalen, int64_t fn,
                            int64_t ts) noexcept:
        st.kind = kind
        st.has_first = has_first
        st.first = first
        st.lo = psn
        st.nbytes = plen
        st.pkts = 1
        st.mtu = plen if has_first else 0
        st.dmalen = dmalen
        st.frame = fn
        st.ts = ts

    cdef int _abandon(self, AFlow f, AMsgs st, bint has_last, uint32_t last,
                      int kind) except -1:
        """The current message stops without its Last (or lacks its First): keep it open so
        a late retransmission can complete it."""
        st.open.append([st.first if st.has_first else None, last if has_last else None, st.lo,
                        kind if kind >= 0 else st.kind, st.nbytes, st.pkts, st.mtu, st.dmalen,
                        st.frame, st.ts])
        st.kind = -1
        if len(st.open) > A_MAX_OPEN:
            self._incomplete(f, st.open.pop(0))
        return 0

    cdef int _late(self, AFlow f, AMsgs st, int pos, int kind, uint32_t psn, int64_t plen,
                   int64_t dmalen, int64_t fn, int64_t ts) except -1:
        """A packet that filled a hole: it may belong to the current or an abandoned
        message."""
        cdef Py_ssize_t j
        cdef list e
        cdef bint hit
        cdef int64_t size
        if pos == AP_FIRST and self._is_write(kind) and self._is_write(st.kind) \
                and st.has_first and st.mtu > 0 and c_psn_diff(psn, st.first) > 0 \
                and dmalen == st.dmalen - <int64_t>c_psn_diff(psn, st.first) * st.mtu:
            pos = AP_MIDDLE  # a late Middle (flowref._late)
        if st.kind >= 0 and not st.has_first and pos == AP_FIRST and c_psn_diff(st.lo, psn) > 0:
            # The head of the message in progress, resent.
            st.has_first = True
            st.first = st.lo = psn
            st.mtu = plen
            st.nbytes += plen
            st.pkts += 1
            st.frame = fn
            st.ts = ts
            if self._is_write(kind):
                st.dmalen = dmalen
            return 0
        if self._is_write(st.kind) and self._is_write(kind) and st.has_first \
                and pos == AP_FIRST and st.mtu > 0 and c_psn_diff(st.first, psn) > 0 \
                and dmalen == st.dmalen + <int64_t>c_psn_diff(st.first, psn) * st.mtu:
            # A selective-repeat WRITE's true First, late (flowref._late)
            st.first = st.lo = psn
            st.dmalen = dmalen
            st.nbytes += plen
            st.pkts += 1
            st.frame = fn
            st.ts = ts
            return 0
        if st.kind >= 0 and pos == AP_MIDDLE and (
                not st.has_first or c_psn_diff(psn, st.first) > 0):
            st.nbytes += plen
            st.pkts += 1
            if not st.has_first and c_psn_diff(psn, st.lo) < 0:
                st.lo = psn
            return 0
        if pos == AP_ONLY:
            self._complete(f, kind, plen, dmalen if self._is_write(kind) else -1, fn, ts)
            return 0
        for j in range(len(st.open) - 1, -1, -1):
            e = st.open[j]
            first, last = e[0], e[1]
            if pos == AP_FIRST:
                hit = first is None and c_psn_diff(e[2], psn) > 0
            elif pos == AP_MIDDLE:
                hit = ((first is None or c_psn_diff(psn, first) > 0)
                       and (last is None or c_psn_diff(last, psn) > 0))
            else:
                hit = last is None and first is not None and c_psn_diff(psn, first) > 0
            if not hit:
                continue
            e[4] += plen
            e[5] += 1
            if pos == AP_FIRST:
                e[0], e[6], e[8], e[9] = psn, plen, fn, ts
                if self._is_write(e[3]):
                    e[7] = dmalen
            elif pos == AP_LAST:
                e[1], e[3] = psn, kind
            if e[0] is not None and e[1] is not None:
                del st.open[j]
                size = e[4] + self._lost(e[0], e[1], e[5], e[6] if e[6] else self.mtus[f.path])
                self._complete(f, e[3], size, e[7], e[8], e[9])
            return 0
        if pos == AP_FIRST:  # a whole lost message being resent: follow it from here
            st.open.append([psn, None, psn, kind, plen, 1, plen,
                            dmalen if self._is_write(kind) else -1, fn, ts])
            if len(st.open) > A_MAX_OPEN:
                self._incomplete(f, st.open.pop(0))
        return 0

    cdef int _complete(self, AFlow f, int kind, int64_t size, int64_t dmalen, int64_t fn,
                       int64_t ts) except -1:
        cdef int64_t *s = f.stats[kind]
        if not f.has_stats[kind]:
            f.has_stats[kind] = True
            s[0], s[1], s[2], s[3] = 1, size, size, size
        else:
            s[0] += 1
            s[1] += size
            if size < s[2]:
                s[2] = size
            if size > s[3]:
                s[3] = size
        if dmalen >= 0 and dmalen != size:
            self._event(fn, ts, "length_mismatch", f, (A_KIND_NAMES[kind], dmalen, size))
        return 0

    cdef int _incomplete(self, AFlow f, list e) except -1:
        first, last, kind = e[0], e[1], e[3]
        what = "First not captured" if first is None else "Last not captured"
        if first is None and last is None:
            what = "First and Last not captured"
        self._event(e[8], e[9], "incomplete_message", f, (A_KIND_NAMES[kind], what, e[5], e[4]))
        return 0

    # -- events ----------------------------------------------------------------------------

    cdef inline bint _stored(self, str name, int64_t fn) except -1:
        """Will an event of this kind and frame be kept (so its text is worth making)?"""
        return self.lines[<int>A_EV_INDEX[name]] < self.ev_cap or self.store.wants(name, fn)

    cdef int _event(self, int64_t fn, int64_t ts, str name, AFlow f, object args,
                    int64_t count=1, int64_t last=0) except -1:
        """One event (or a folded run of ``count``) of the flowrules.EVENTS row ``name``;
        ``args`` None when _stored said it would not be kept."""
        cdef int k = A_EV_INDEX[name]
        if f is not None and A_EV_CTR[k] >= 0:
            f.c[A_EV_CTR[k]] += count
        self.lines[k] += 1
        if args is None:
            self.store.skip(name, count)
        else:
            self.store.add(tuple.__new__(A_EVENT, (
                fn, A_EV_SEV[k], name, f.id if f is not None else -1,
                f.qp if f is not None else -1,
                (A_EV_BURST[k] if count > 1 else A_EV_TEXT[k]) % args, ts, count, last)))
        return 0

    # -- the end ---------------------------------------------------------------------------

    def finish(self):
        """Close open state (pending READs, bursts, unfinished messages) and sort the
        events."""
        cdef AFlow f
        cdef AMsgs st
        cdef int side
        if self.finished:
            return
        self.finished = True
        for f in self.flows:
            if f.has_pending:
                self._resolve_read(f, 0, False)
            for side in range(2):
                if f.burst[side].open:
                    self._close_burst(f, side)
            if f.burst[2].open:
                self._close_spurious(f)
            for st in (f.reqmsg, f.rspmsg):
                self._release(f, st)
                if st.kind >= 0:
                    self._abandon(f, st, False, 0, -1)
                for e in st.open:
                    self._incomplete(f, e)
                st.open.clear()
        self.events = self.store.kept()
