# Per-flow capture analysis: the compiled twin of roce.dissect.flows.Analyzer.
#
# Included by _fastpath.pyx: it walks frames with do_walk, checks ICRCs with icrc_raw and
# sequences PSNs with PSNTracker's C methods, all without leaving C for a clean packet.
# roce/dissect/flows.py is the specification (its module docstring has the definitions);
# this file follows it function by function (_slow_group -> _packet, _advance, _late, ...),
# processing every frame in capture order, as the reference does with batch=1.  A property
# test feeds both the same faulty traffic and compares the reports.
#
# Tables come from configure_flows(), derived in roce.dissect.cflows from the opcode table
# and the header layouts; event texts are the reference's templates, passed in.

from libc.string cimport memcmp

DEF A_NKINDS = 11      # message kinds, flows.K_*
DEF A_NEVENTS = 16     # event kinds (at most), in flows.EVENT_KINDS order
DEF A_MAX_ADDR = 32    # longest address pair (IPv6 / GRH)

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
cdef int A_SPAN_A[8]      # by L3 kind: the address pair's slice [a, b) from the L3 start
cdef int A_SPAN_B[8]
cdef int A_L3LEN_F[8]     # by L3 kind: the L3 length field (F_*) and what it leaves out
cdef int A_L3LEN_X[8]
cdef bint A_CONFIGURED = False
cdef int A_DEFAULT_MTU = 0
cdef int A_IB_MTUS[5]
cdef int A_MAX_OPEN = 0
cdef int64_t A_MAX_READ_PSNS = 0
cdef int A_KIND_WRITE = -1, A_KIND_WRITE_IMM = -1, A_KIND_READ = -1
cdef int A_EV_SEV[A_NEVENTS]
cdef int A_NEV = 0
cdef int E_MALFORMED, E_BAD_ICRC, E_NAK_FATAL, E_GAP, E_RETRANS, E_OOO, E_NAK_SEQ
cdef int E_RNR, E_LENGTH, E_RESERVED, E_CNP, E_ECN, E_INCOMPLETE
cdef list A_EV_NAMES = []
cdef dict A_TEXT = {}
cdef list A_KIND_NAMES = []
cdef list A_NAK_TEXT = []   # by NAK code: its name
cdef list A_RNR_TEXT = []   # by timer code: "0.64"
cdef object A_EVENT = tuple  # flows.Event


cdef void _a_spec(ASpec *s, object spec):
    if spec is None:
        s.off = -1
        s.n = s.shift = s.need = 0
        s.mask = 0
    else:
        s.off, s.n, s.shift, s.mask, s.need = spec


def configure_flows(dict cfg):
    """Tables and texts for FlowEngine, from roce.dissect.cflows (derived from the opcode
    table, the header layouts and roce.dissect.flows)."""
    global A_CONFIGURED, A_DEFAULT_MTU, A_MAX_OPEN, A_MAX_READ_PSNS, A_KIND_WRITE, A_KIND_WRITE_IMM, A_KIND_READ, A_NEV
    global E_MALFORMED, E_BAD_ICRC, E_NAK_FATAL, E_GAP, E_RETRANS, E_OOO, E_NAK_SEQ
    global E_RNR, E_LENGTH, E_RESERVED, E_CNP, E_ECN, E_INCOMPLETE
    global A_EV_NAMES, A_TEXT, A_KIND_NAMES, A_NAK_TEXT, A_RNR_TEXT, A_EVENT
    cdef int code, k
    # The enums above are the reference's numbering, written out for C: check they still are.
    if (tuple(cfg["classes"]) != (AC_DATA, AC_READ, AC_ATOMIC, AC_ONLYREQ, AC_READ_RESP,
                                  AC_ACK, AC_ATOMIC_ACK, AC_CNP)
            or tuple(cfg["positions"]) != (AP_FIRST, AP_MIDDLE, AP_LAST, AP_ONLY)
            or tuple(cfg["psn_events"]) != (AEV_FIRST, AEV_IN_ORDER, AEV_GAP, AEV_LATE,
                                            AEV_DUPLICATE)):
        raise ValueError("flow engine: class, position or PSN event numbering differs from "
                         "roce.dissect.flows / roce.psn")
    if len(cfg["kind_names"]) != A_NKINDS:
        raise ValueError("flow engine: %d message kinds, built for %d"
                         % (len(cfg["kind_names"]), A_NKINDS))
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
    for k in range(8):
        A_SPAN_A[k] = A_SPAN_B[k] = 0
        A_L3LEN_F[k] = -1
        A_L3LEN_X[k] = 0
    for k, (a, b) in cfg["spans"].items():
        A_SPAN_A[k], A_SPAN_B[k] = a, b
    for k, (f, extra) in cfg["l3_len"].items():
        A_L3LEN_F[k], A_L3LEN_X[k] = f, extra
    A_DEFAULT_MTU = cfg["default_mtu"]
    for k, m in enumerate(cfg["ib_mtus"]):
        A_IB_MTUS[k] = m
    A_MAX_OPEN = cfg["max_open"]
    A_MAX_READ_PSNS = cfg["max_read_psns"]
    A_KIND_WRITE, A_KIND_WRITE_IMM, A_KIND_READ = cfg["write_kinds"] + (cfg["read_kind"],)
    names = list(cfg["event_kinds"])
    if len(names) > A_NEVENTS:
        raise ValueError("too many event kinds")
    A_NEV = len(names)
    for k, (name, sev) in enumerate(names):
        A_EV_SEV[k] = sev
    A_EV_NAMES = [name for name, _ in names]
    idx = {name: k for k, name in enumerate(A_EV_NAMES)}
    E_MALFORMED, E_BAD_ICRC, E_NAK_FATAL = idx["malformed"], idx["bad_icrc"], idx["nak_fatal"]
    E_GAP, E_RETRANS, E_OOO = idx["gap"], idx["retransmission"], idx["out_of_order"]
    E_NAK_SEQ, E_RNR, E_LENGTH = idx["nak_sequence"], idx["rnr_nak"], idx["length_mismatch"]
    E_RESERVED, E_CNP, E_ECN = idx["reserved_syndrome"], idx["cnp"], idx["ecn_ce"]
    E_INCOMPLETE = idx["incomplete_message"]
    A_TEXT = dict(cfg["texts"])
    A_KIND_NAMES = list(cfg["kind_names"])
    A_NAK_TEXT = list(cfg["nak_names"])
    A_RNR_TEXT = list(cfg["rnr_ms"])
    A_EVENT = cfg["event"]
    A_CONFIGURED = True


cdef inline int64_t a_rd(const uint8_t *b, ASpec *s) noexcept nogil:
    return <int64_t>((rd64(b + s.off, s.n) >> s.shift) & s.mask)


cdef class AMsgs:
    """Message reassembly state of one direction of one flow (flows._Msgs)."""

    cdef int kind
    cdef bint has_first
    cdef uint32_t first, lo
    cdef int64_t nbytes, pkts, mtu, dmalen, frame, ts
    cdef list open

    def __cinit__(self):
        self.kind = -1
        self.dmalen = -1
        self.open = []


cdef class AFlow:
    """Counters of one flow (flows.Flow), read out by roce.dissect.cflows at the end."""

    cdef readonly int id, l3, path
    cdef readonly bytes addr
    cdef readonly int64_t qp, packets, nbytes, payload, req_payload, rsp_payload
    cdef readonly int64_t first_ts, last_ts, req_first, rsp_first, rsp_last
    cdef readonly PSNTracker req, rsp
    cdef readonly int64_t incomplete, acks, reserved_syn, atomic_acks, cnps, ecn_ce
    cdef readonly int64_t bad_icrc, malformed, truncated
    cdef bint has_pending
    cdef int64_t pend_fn, pend_psn, pend_dmalen, pend_ts
    cdef AMsgs reqmsg, rspmsg
    cdef int64_t stats[A_NKINDS][4]
    cdef bint has_stats[A_NKINDS]
    cdef int64_t naks[32]
    cdef int64_t rnr[32]

    def __cinit__(self):
        self.first_ts = self.last_ts = -1
        self.req_first = self.rsp_first = self.rsp_last = -1
        self.reqmsg = AMsgs()
        self.rspmsg = AMsgs()

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
    """Streaming analyser over raw frames; see roce.dissect.cflows.CompiledAnalyzer."""

    cdef int udp_port
    cdef int64_t ev_cap
    cdef object store
    cdef readonly int64_t frames, not_roce, malformed_unattributed, truncated_unattributed
    cdef readonly int64_t first_ts, last_ts
    cdef readonly list flows, events
    cdef int64_t counts[A_NEVENTS]  # a shortcut: below the cap every event is kept
    cdef ASlot *slots
    cdef Py_ssize_t cap, used
    cdef dict paths
    cdef int64_t *mtus
    cdef Py_ssize_t npaths, mtu_cap
    cdef object explain
    cdef bint finished

    def __cinit__(self, int udp_port, store, explain):
        if not A_CONFIGURED:
            raise RuntimeError("FlowEngine: configure_flows() has not run (import "
                               "roce.dissect.cflows)")
        self.udp_port = udp_port
        self.store = store  # flows.EventStore: counts events, keeps the first ones
        self.ev_cap = store.cap
        self.explain = explain
        self.first_ts = self.last_ts = -1
        self.flows = []
        self.events = []
        self.paths = {}
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

    # -- one frame (flows.Analyzer._feed_batch, _bad_frame and _slow_group) -----------------

    cdef int _frame(self, object obj, const uint8_t *p, Py_ssize_t n, bint have_caps,
                    int64_t origlen, int64_t ts, int linktype) except -1:
        cdef WalkResult w
        cdef int64_t fn
        cdef int op, st, bth, ecn = 0, a, b, k
        cdef int64_t plen, k0 = 0, k1 = 0, k2 = 0
        cdef uint32_t psn, qp
        cdef bint icrc_ok, snapped = False, bad = False, truncated = False
        cdef object text = None
        cdef const uint8_t *bp
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
        elif st < 10:
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
                    self._event(fn, ts, E_MALFORMED, None, self._malformed(obj, p, n, linktype))
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
            if snapped and w.payload_off >= 0 and st == S_L3_LENGTH:
                # All headers were captured: the L3 length says how much payload there was.
                k = A_L3LEN_F[w.l3_kind]
                plen = (<int64_t>w.l3_off + A_L3LEN_X[w.l3_kind] + <int64_t>rd(p, w.l3_off, k)
                        - 4 - <int64_t>rd(p, bth, F_BTH_PADCNT) - w.payload_off)
                if plen < 0:
                    plen = 0
            if snapped:
                truncated = True
            else:
                bad = True
                text = self._malformed(obj, p, n, linktype)
        if w.l3_kind == 4:
            ecn = rd(p, w.l3_off, F_IP_ECN)
        elif w.l3_kind == 6:
            ecn = rd(p, w.l3_off, F_IP6_TCLASS) & 3
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
        a = A_SPAN_A[w.l3_kind]
        b = A_SPAN_B[w.l3_kind]
        f = self._flow(w.l3_kind, p + w.l3_off + a, b - a, qp)
        if f.first_ts < 0:
            f.first_ts = ts
        f.last_ts = ts
        self._packet(f, obj, p, n, linktype, &w, fn, ts, op, psn, plen, origlen, ecn, icrc_ok,
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
                     int64_t origlen, int ecn, bint icrc_ok, int64_t k0, int64_t k1, int64_t k2,
                     bint bad, bint truncated, object text) except -1:
        cdef int cls = A_CLS[op], pos = A_POS[op], kind = A_KIND[op], ev, t, v
        cdef PSNTracker tr
        cdef int32_t d
        if bad:
            f.malformed += 1
            self._event(fn, ts, E_MALFORMED, f, text)
        elif truncated:
            f.truncated += 1
        f.packets += 1
        f.nbytes += origlen
        f.payload += plen
        if ecn == 3:
            f.ecn_ce += 1
            self._event(fn, ts, E_ECN, f, A_TEXT["ecn_ce"])
        if not icrc_ok:
            f.bad_icrc += 1
            if self._stored(E_BAD_ICRC, fn):
                self._event(fn, ts, E_BAD_ICRC, f, A_TEXT["bad_icrc"] % (
                    stored(p, w.icrc_off),
                    bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off,
                                     w.icrc_off))))
            else:
                self._event(fn, ts, E_BAD_ICRC, f, None)
        if cls <= AC_ONLYREQ:  # a request
            f.req_payload += plen
            if not A_SEQ[op]:  # UD: counted, not sequenced
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
            ev = self._feed_req(f, psn, 1, fn, ts)
            if ev == AEV_DUPLICATE or bad:
                return 0
            if cls == AC_DATA:
                if ev == AEV_LATE:
                    self._late(f, f.reqmsg, pos, kind, psn, plen, k2, fn, ts)
                else:
                    self._advance(f, f.reqmsg, pos, kind, psn, plen, k2, fn, ts)
            elif cls == AC_READ:  # a READ whose RETH was not captured
                self._complete(f, kind, 0, -1, fn, ts)
            else:
                self._complete(f, kind, 8 if cls == AC_ATOMIC else plen, -1, fn, ts)
        elif cls == AC_ACK:
            self._note_rsp_psn(f, psn)
            if k0 < 0:  # AETH not captured
                return 0
            t = (k0 >> 5) & 3
            v = k0 & 0x1F
            if t == 0:
                f.acks += 1
            elif t == 1:
                f.rnr[v] += 1
                if self._stored(E_RNR, fn):
                    self._event(fn, ts, E_RNR, f, A_TEXT["rnr_nak"] % (A_RNR_TEXT[v], psn))
                else:
                    self._event(fn, ts, E_RNR, f, None)
            elif t == 3:
                f.naks[v] += 1
                t = E_NAK_SEQ if v == 0 else E_NAK_FATAL
                if self._stored(t, fn):
                    self._event(fn, ts, t, f, A_TEXT["nak"] % (A_NAK_TEXT[v], k1, psn))
                else:
                    self._event(fn, ts, t, f, None)
            else:
                f.reserved_syn += 1
                self._event(fn, ts, E_RESERVED, f, A_TEXT["reserved_syndrome"] % k0)
        elif cls == AC_READ_RESP or cls == AC_ATOMIC_ACK:
            self._note_rsp_psn(f, psn)
            f.rsp_payload += plen
            if cls == AC_ATOMIC_ACK:
                f.atomic_acks += 1
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
            ev = self._feed(f, tr, psn, 1, fn, ts, True)
            if cls == AC_ATOMIC_ACK or ev == AEV_DUPLICATE or bad:
                return 0
            if ev == AEV_LATE:
                self._late(f, f.rspmsg, pos, kind, psn, plen, -1, fn, ts)
            else:
                self._advance(f, f.rspmsg, pos, kind, psn, plen, -1, fn, ts)
        else:  # CNP
            f.cnps += 1
            self._event(fn, ts, E_CNP, f, A_TEXT["cnp"])
        return 0

    # -- PSN sequencing --------------------------------------------------------------------

    cdef int _feed_req(self, AFlow f, uint32_t psn, int count, int64_t fn, int64_t ts) except -1:
        if f.req is None:
            f.req = PSNTracker()
        return self._feed(f, f.req, psn, count, fn, ts, False)

    cdef int _feed(self, AFlow f, PSNTracker t, uint32_t psn, int count, int64_t fn,
                   int64_t ts, bint response) except -1:
        cdef uint32_t exp = t.next
        cdef bint started = t.started
        cdef int ev = t.feed(psn, count)
        cdef int kind
        if ev > AEV_IN_ORDER and started:
            kind = E_GAP if ev == AEV_GAP else E_OOO if ev == AEV_LATE else E_RETRANS
            if not self._stored(kind, fn):
                self._event(fn, ts, kind, f, None)
                return ev
            what = "response " if response else ""
            if ev == AEV_GAP:
                text = A_TEXT["gap"] % (what, exp, psn, c_psn_diff(psn, exp))
            elif ev == AEV_LATE:
                text = A_TEXT["out_of_order"] % (what, psn)
            else:
                text = A_TEXT["retransmission"] % (what, psn)
            self._event(fn, ts, kind, f, text)
        return ev

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
        if self._feed_req(f, psn, <int>count, fn, ts) != AEV_DUPLICATE:
            self._complete(f, A_KIND_READ, dmalen, -1, fn, ts)
        return 0

    cdef inline void _note_rsp_psn(self, AFlow f, uint32_t psn) noexcept:
        if f.rsp_first < 0:
            f.rsp_first = psn
        f.rsp_last = psn

    # -- message reassembly ----------------------------------------------------------------

    cdef inline bint _is_write(self, int kind) noexcept:
        return kind == A_KIND_WRITE or kind == A_KIND_WRITE_IMM

    cdef int _advance(self, AFlow f, AMsgs st, int pos, int kind, uint32_t psn, int64_t plen,
                      int64_t dmalen, int64_t fn, int64_t ts) except -1:
        """A packet that advanced the sequence (in order, first, or after a gap)."""
        cdef int64_t size
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
            self._event(fn, ts, E_LENGTH, f,
                        A_TEXT["length_mismatch"] % (A_KIND_NAMES[kind], dmalen, size))
        return 0

    cdef int _incomplete(self, AFlow f, list e) except -1:
        f.incomplete += 1
        first, last, kind = e[0], e[1], e[3]
        what = "First not captured" if first is None else "Last not captured"
        if first is None and last is None:
            what = "First and Last not captured"
        self._event(e[8], e[9], E_INCOMPLETE, f,
                    A_TEXT["incomplete_message"] % (A_KIND_NAMES[kind], what, e[5], e[4]))
        return 0

    # -- events ----------------------------------------------------------------------------

    cdef inline bint _stored(self, int kind, int64_t fn) except -1:
        """Will an event of this kind and frame be kept (so its text is worth making)?"""
        return self.counts[kind] < self.ev_cap or self.store.wants(A_EV_NAMES[kind], fn)

    cdef int _event(self, int64_t fn, int64_t ts, int kind, AFlow f, object text) except -1:
        """One event; ``text`` None when _stored said it would not be kept."""
        self.counts[kind] += 1
        if text is None:
            self.store.skip(A_EV_NAMES[kind])
        else:
            self.store.add(tuple.__new__(A_EVENT, (
                fn, A_EV_SEV[kind], A_EV_NAMES[kind], f.id if f is not None else -1,
                f.qp if f is not None else -1, text, ts)))
        return 0

    # -- the end ---------------------------------------------------------------------------

    def finish(self):
        """Close open state (pending READs, unfinished messages) and sort the events."""
        cdef AFlow f
        cdef AMsgs st
        if self.finished:
            return
        self.finished = True
        for f in self.flows:
            if f.has_pending:
                self._resolve_read(f, 0, False)
            for st in (f.reqmsg, f.rspmsg):
                if st.kind >= 0:
                    self._abandon(f, st, False, 0, -1)
                for e in st.open:
                    self._incomplete(f, e)
                st.open.clear()
        self.events = self.store.kept()
