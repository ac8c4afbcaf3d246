# The C types of the flow engine's compiled form.  The engine itself is flowref.py beside
# this file: setup.py compiles that file, unchanged, into roce.analysis._flowengine, and Cython
# reads these declarations as its own (an augmenting .pxd, named after the module it builds).
# Declarations only: no rule is written here.  What is typed:
#   - tables as C arrays (flowref.py builds them as lists of the sizes given here; a size is
#     flowref.py's _NOPS, _NL3, _NCODES or _MAX_*), numbers the rules switch on as C integers;
#   - the state classes as final extension types, their counters as C integers (64 bits:
#     frame numbers, times, byte counts; 24-bit PSNs in 32 bits) and the fast path's
#     PSNTracker;
#   - the per-packet functions and methods as C functions, with their locals;
#   - the fast path's walk, ICRC and VCRC in C (roce/_fastpath.pxd), and memcmp.
# What happens rarely (held packets, abandoned messages, events) stays Python objects.
# flowref.py's __slots__ name the attributes declared here, and its tables have these sizes
# (tests/test_flowrules.py holds them equal), so the interpreted form refuses an attribute the
# compiled one has no room for.

cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp

from roce._fastpath cimport PSNTracker, WalkResult, do_walk, icrc_raw, vcrc_raw

# -- tables and numbers (the sizes: flowref.py's _NOPS, _NL3, _MAX_* and _NCODES) ---------------
cdef int _F_OPCODE, _F_TVER, _F_DESTQP, _F_PSN, _F_PADCNT, _F_ACKREQ, _SZ_BTH
cdef int _VALID[256], _CLS[256], _POS[256], _KIND[256], _SEQ[256], _ACKED[256]
cdef int _DMALEN[256], _SYN[256], _MSN[256]
cdef int _NPIECE[8], _POFF[32], _PLEN[32], _SPAN[8], _KEYLEN[8]
cdef int _L3LEN[8], _L3LEN_X[8], _L3LEN_U[8]
cdef int _CE, _BECN
cdef int _MARK[16], _MARK_AT_BTH[16], _MARK_MASK[16], _MARK_VALUE[16]
cdef int _S_OFF[64], _S_N[64], _S_SHIFT[64], _S_NEED[64]
cdef uint64_t _S_MASK[64]
cdef int _SYN_RULE[256], _SYN_VALUE[256]
cdef int64_t _IB_MTUS[5]
cdef int _EV_SEV[32], _EV_CTR[32]
cdef int _NOPS, _NL3, _NCODES, _MAX_PIECES, _MAX_SPECS, _MAX_EVENTS, _MAX_COUNTERS, _MAX_KINDS
cdef dict _EV_INDEX
cdef list _EV_KINDS, _SIDE_WORDS, _KIND_NAMES, _NAK_TEXTS, _RNR_TEXTS
cdef int _NC, _NKINDS, _SPURIOUS
cdef int _CT_PACKETS, _CT_BYTES, _CT_PAYLOAD, _CT_UNIQUE, _CT_REQ_PAYLOAD, _CT_RSP_PAYLOAD
cdef int _CT_ACKS, _CT_ATOMIC_ACKS, _CT_TRUNCATED, _CT_RETX_SELECTIVE, _CT_RETX_GO_BACK
cdef int _CT_TIMED, _CT_UNACKED, _CT_RTT, _CT_RTT_EXCLUDED
cdef int _C_DATA, _C_READ, _C_ATOMIC, _C_ONLYREQ, _C_READ_RESP, _C_ACK, _C_ATOMIC_ACK, _C_CNP
cdef int _P_FIRST, _P_MIDDLE, _P_LAST, _P_ONLY
cdef int _K_WRITE, _K_WRITE_IMM, _K_READ, _K_READ_RESP
cdef int _SYN_ACK, _SYN_RNR, _SYN_NAK
cdef int _EV_DUPLICATE, _EV_GAP, _EV_IN_ORDER, _EV_LATE
cdef int _OK, _FIRST_BAD, _BAD_TRUNCATED, _BAD_L3_LENGTH, _L3_LRH, _L3_LRH_GRH
cdef uint32_t _PSN_MASK
cdef int64_t _SACK_AHEAD, _ATOMIC_BYTES, _DEFAULT_MTU, _MAX_OPEN, _REORDER_HOLD
cdef int64_t _MAX_READ_PSNS, _VCRC_SIZE, _M32, _SIGN32, _WRAP32, _I64_MAX, _I64_MIN, _NS
cdef uint64_t _M64, _FNV_BASIS, _FNV_PRIME
cdef int64_t _MIN_MTU, _MAX_OUTSTANDING, _W_END_SHIFT, _W_END_MASK, _W_ENDED, _W_HEADLESS
cdef int64_t _W_OWN_RESPONSE, _W_RETX, _LSUB_BITS, _LSUB, _LBUCKETS, _LEXACT

# -- reading a frame, numbers --------------------------------------------------------------------
@cython.locals(q=Py_ssize_t, v=uint64_t, k=int)
cdef inline uint64_t _field(const uint8_t *p, Py_ssize_t base, int s) noexcept
@cython.locals(b0=uint32_t, b1=uint32_t, b2=uint32_t, b3=uint32_t)
cdef inline uint32_t _u32(const uint8_t *p, Py_ssize_t at) noexcept
@cython.locals(b0=uint32_t, b1=uint32_t, b2=uint32_t, b3=uint32_t)
cdef inline uint32_t _u32_pcap(const uint8_t *p, Py_ssize_t at, bint big_endian) noexcept
@cython.locals(s=int)
cdef inline bint _marked(const uint8_t *p, int row, int l3_off, int bth) noexcept
@cython.locals(w=WalkResult)
cdef inline WalkResult _walk(const uint8_t *p, Py_ssize_t n, int linktype, int udp_port) noexcept
@cython.locals(crc=uint32_t)
cdef inline uint32_t _icrc(const uint8_t *p, WalkResult w) noexcept
@cython.locals(crc=int)
cdef int _vcrc(const uint8_t *p, Py_ssize_t end) noexcept
@cython.locals(d=int64_t)
cdef inline int32_t _psn_diff(uint32_t a, uint32_t b) noexcept
cdef inline int64_t _add(int64_t total, int64_t n) except? -1
@cython.locals(missing=int64_t)
cdef inline int64_t _lost(uint32_t first, uint32_t last, int64_t pkts, int64_t mtu) noexcept
@cython.locals(h=uint64_t, o=Py_ssize_t, k=int, j=int)
cdef inline uint64_t _hash(const uint8_t *p, Py_ssize_t l3_off, int l3, uint32_t qp) noexcept
@cython.locals(pieces=list, o=Py_ssize_t, k=int)
cdef bytes _addr(const uint8_t *p, Py_ssize_t l3_off, int l3)

# -- state -------------------------------------------------------------------------------------
@cython.final
cdef class _Path:
    cdef int64_t mtu


@cython.final
cdef class _Held:
    cdef int32_t key
    cdef uint32_t psn
    cdef int pos, kind
    cdef int64_t plen, dmalen, fn, ts


@cython.final
cdef class _Msgs:
    cdef int kind
    cdef bint has_first
    cdef uint32_t first, lo
    cdef int64_t nbytes, pkts, mtu, dmalen, frame, ts
    cdef list open, held
    cdef uint32_t base
    cdef int64_t hi, floor

    @cython.locals(held=list, key=int32_t, i=Py_ssize_t, e=_Held)
    cdef int hold(self, uint32_t psn, int pos, int kind, int64_t plen, int64_t dmalen,
                  int64_t fn, int64_t ts) except -1


@cython.final
cdef class _Ring:
    cdef int64_t[::1] w, t
    cdef Py_ssize_t head, n, cap

    cdef inline int64_t word(self, Py_ssize_t i) noexcept
    cdef inline int64_t time(self, Py_ssize_t i) noexcept
    cdef inline int set_word(self, Py_ssize_t i, int64_t w) noexcept
    cdef inline int set_time(self, Py_ssize_t i, int64_t t) noexcept
    cdef inline int pop(self) noexcept
    @cython.locals(mask=Py_ssize_t, j=Py_ssize_t)
    cdef int insert(self, Py_ssize_t i, int64_t w, int64_t t) except -1
    @cython.locals(cap=Py_ssize_t, k=Py_ssize_t)
    cdef int _grow(self) except -1
    @cython.locals(lo=Py_ssize_t, hi=Py_ssize_t, mid=Py_ssize_t, base=uint32_t, key=int32_t)
    cdef Py_ssize_t find(self, int64_t psn) noexcept


@cython.final
cdef class _Hist:
    cdef int64_t n, least, most
    cdef Py_ssize_t lo, size, excap
    cdef int64_t[::1] b, ex

    @cython.locals(k=int64_t)
    cdef int add(self, int64_t v, int64_t count) except -1
    @cython.locals(cap=Py_ssize_t, e=int64_t[::1], j=Py_ssize_t)
    cdef int _keep(self, Py_ssize_t i, int64_t v) except -1
    @cython.locals(lo=Py_ssize_t, hi=Py_ssize_t, j=Py_ssize_t)
    cdef int _widen(self, Py_ssize_t k) except -1
    @cython.locals(j=Py_ssize_t)
    cdef int merge(self, _Hist other) except -1
    @cython.locals(rank=int64_t, seen=int64_t, j=Py_ssize_t, k=Py_ssize_t, v=int64_t)
    cdef int64_t quantile(self, int64_t num, int64_t den) except? -1
    cpdef summary(self)


@cython.final
cdef class _Timing:
    cdef _Ring msgs, probes
    cdef list aside
    cdef int64_t cov, hi
    cdef _Hist mct, rtt


@cython.final
cdef class _Flow:
    cdef readonly int id, l3
    cdef readonly bytes addr
    cdef readonly int64_t qp
    cdef uint64_t hash
    cdef _Path path
    cdef int64_t first_ts, last_ts
    cdef PSNTracker req, rsp
    cdef int64_t req_first, rsp_first, rsp_last
    cdef int64_t c[32]  # _MAX_COUNTERS
    cdef int64_t stats[64]  # 4 * _MAX_KINDS
    cdef int64_t naks[32], rnr[32]  # _NCODES
    cdef bint has_pending
    cdef int64_t pend_fn, pend_dmalen, pend_ts
    cdef uint32_t pend_psn
    cdef _Msgs reqmsg, rspmsg
    cdef int b_open[3]
    cdef int64_t b_first[3], b_ts[3], b_last[3], b_count[3]
    cdef uint32_t b_lo[3], b_hi[3]
    cdef int64_t ack_msn, nak_psn, acked
    cdef bytearray sacks
    cdef list back
    cdef _Timing tm
    cdef _Flow ack_of, acked_by


@cython.locals(same=bint)
cdef inline bint _same_bytes(const uint8_t *a, Py_ssize_t i, const uint8_t *p, Py_ssize_t o,
                             Py_ssize_t n) noexcept
@cython.locals(a="const uint8_t *", i=int, k=int, n=int)
cdef inline bint _is_flow(_Flow f, const uint8_t *p, Py_ssize_t l3_off, int l3, uint32_t qp) noexcept
cdef inline void _burst_start(_Flow f, int side, int64_t fn, int64_t ts, uint32_t psn) noexcept
cdef inline bint _burst_extends(_Flow f, int side, int64_t fn, uint32_t psn) noexcept
@cython.locals(none=bint)
cdef inline bint _no_holes(PSNTracker t) noexcept
cdef inline void _start(_Msgs st, int kind, bint has_first, uint32_t psn, int64_t plen,
                 int64_t dmalen, int64_t fn, int64_t ts) noexcept
cdef inline void _note_rsp_psn(_Flow f, uint32_t psn) noexcept
cdef inline bint _is_write(int kind) noexcept
@cython.locals(d=int32_t, sacks=bytearray, i=int64_t, q=int64_t)
cdef void _ack_to(_Flow f, uint32_t psn)
@cython.locals(d=int32_t, q=uint32_t)
cdef void _sack(_Flow f, uint32_t psn)
@cython.locals(x=_Flow, c=_Flow, t=PSNTracker, d=int32_t)
cdef void _nak_below_start(_Flow f, uint32_t psn)
@cython.locals(y=_Flow, c=_Flow, d=int32_t, q=uint32_t)
cdef bint _acknowledged(_Flow x, uint32_t psn) except -1

# -- completion and round-trip times -------------------------------------------------------------
cdef inline int64_t _elapsed(int64_t t0, int64_t ts) noexcept
@cython.locals(n=int)
cdef inline int _log2(int64_t v) noexcept
@cython.locals(e=int)
cdef inline Py_ssize_t _bucket(int64_t v) noexcept
@cython.locals(e=int64_t)
cdef inline int64_t _bucket_low(Py_ssize_t k) noexcept
cdef inline int64_t _bucket_width(Py_ssize_t k) noexcept
@cython.locals(tm=_Timing, n=int64_t, m=int64_t, end=int64_t, last=bint)
cdef int _time_request(_Flow f, int64_t psn, int pos, int cls, int ackreq, int dup,
                       int64_t dmalen, int64_t ts) except -1
cdef inline bint _extends(_Flow f, int64_t psn) noexcept
cdef inline bint _only_covers(_Flow y, int64_t c) noexcept
@cython.locals(i=Py_ssize_t)
cdef bint _waits(_Ring r, int64_t psn) noexcept
@cython.locals(r=_Ring, w=int64_t, b=int64_t, i=Py_ssize_t, p=int64_t, nxt=int64_t)
cdef int _msg_head(_Flow f, _Timing tm, int64_t psn, int cls, int pos, int64_t ts) except -1
@cython.locals(r=_Ring, b=int64_t, w=int64_t)
cdef int _msg_part(_Flow f, _Timing tm, int64_t psn, bint last, int64_t ts) except -1
@cython.locals(r=_Ring)
cdef int _push(_Flow f, _Timing tm, Py_ssize_t i, int64_t w, int64_t ts) except -1
@cython.locals(r=_Ring, i=Py_ssize_t)
cdef int _probe(_Timing tm, int64_t psn, int dup, int64_t ts) except -1
@cython.locals(x=_Flow, z=_Flow, cand=_Flow, tm=_Timing)
cdef _Flow _answered(_Flow y, int64_t c)
@cython.locals(r=_Ring, lo=int64_t)
cdef int _explains(_Timing tm, int64_t c) except? -2
@cython.locals(x=_Flow, tm=_Timing, r=_Ring, w=int64_t, end=int64_t, t0=int64_t, j=Py_ssize_t,
               e=list)
cdef int _time_response(_Flow y, int64_t c, int64_t done, int64_t ts) except -1
@cython.locals(tm=_Timing, r=_Ring, i=Py_ssize_t)
cdef int _unacknowledged(_Flow f) except -1


# -- the engine --------------------------------------------------------------------------------
@cython.final
cdef class Analyzer:
    cdef readonly int udp_port, batch
    cdef object store
    cdef int64_t ev_cap
    cdef readonly int64_t frames, not_roce, malformed_unattributed, truncated_unattributed
    cdef readonly int64_t first_ts, last_ts
    cdef readonly list flows, events
    cdef int64_t lines[32]  # _MAX_EVENTS
    cdef int[::1] slots
    cdef Py_ssize_t cap, used
    cdef _Flow last, last2
    cdef dict paths, by_addr
    cdef object _report

    @cython.locals(i=Py_ssize_t, ts=int64_t)
    cpdef feed_frames(self, datas, ts_ns, caplen, origlen, int linktype)
    @cython.locals(q="const uint8_t *", p="const uint8_t *", caplen=int64_t, ts=int64_t)
    cpdef tuple feed_pcap(self, const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end,
                          bint big_endian, int64_t frac_mul, int linktype, int64_t max_record)
    @cython.locals(fn=int64_t, w=WalkResult, st=int, bth=int, l3k=int, l3o=int, bad=bint,
                   truncated=bint, snapped=bint, op=int, s=int, plen=int64_t, f=_Flow)
    cdef int _frame(self, object obj, const uint8_t *p, Py_ssize_t n, bint have_caps,
                    int64_t origlen, int64_t ts, int linktype) except -1
    cdef _malformed(self, object obj, const uint8_t *p, Py_ssize_t n, int linktype)
    @cython.locals(h=uint64_t, mask=Py_ssize_t, i=Py_ssize_t, k=int, f=_Flow, g=_Flow)
    cdef _Flow _flow(self, const uint8_t *p, Py_ssize_t l3_off, int l3, uint32_t qp)
    @cython.locals(addr=bytes, rev=bytes, half=Py_ssize_t, path=_Path, f=_Flow, g=_Flow)
    cdef _Flow _new_flow(self, const uint8_t *p, Py_ssize_t l3_off, int l3, uint32_t qp,
                         uint64_t h)
    @cython.locals(mask=Py_ssize_t, i=Py_ssize_t)
    cdef void _insert(self, int fid, uint64_t h) noexcept
    @cython.locals(bth=int, l3o=int, psn=uint32_t, dmalen=int64_t, syn=int64_t, msn=int64_t,
                   s=int, cls=int, pos=int, kind=int, icrc=uint32_t, icrc_stored=uint32_t,
                   calc=int, got=int, rule=int, v=int, t=PSNTracker, selective=bint,
                   timed=bint, ev=int, ackreq=int)
    cdef int _packet(self, _Flow f, const uint8_t *p, Py_ssize_t n, WalkResult w, int64_t fn,
                     int64_t ts, int op, int64_t plen, int64_t origlen, bint bad,
                     bint truncated) except -1
    @cython.locals(t=PSNTracker, ev=int)
    cdef int _feed_req(self, _Flow f, uint32_t psn, int count, int64_t fn, int64_t ts,
                       bint read) except -1
    @cython.locals(s=int)
    cdef int _close_spurious(self, _Flow f) except -1
    @cython.locals(exp=uint32_t, started=bint, ev=int)
    cdef int _feed(self, _Flow f, PSNTracker t, uint32_t psn, int count, int64_t fn, int64_t ts,
                   int side) except -1
    @cython.locals(n=int64_t)
    cdef int _close_burst(self, _Flow f, int side) except -1
    @cython.locals(fn=int64_t, psn=uint32_t, dmalen=int64_t, ts=int64_t, mtu=int64_t,
                   m=int64_t, count=int64_t, d=int32_t, k=int, c=int64_t)
    cdef int _resolve_read(self, _Flow f, uint32_t next_psn, bint have_next) except -1
    @cython.locals(e=_Held)
    cdef int _reassemble(self, _Flow f, _Msgs st, PSNTracker t, int pos, int kind, uint32_t psn,
                         int64_t plen, int64_t dmalen, int64_t fn, int64_t ts) except -1
    cdef inline int _place(self, _Flow f, _Msgs st, int pos, int kind, uint32_t psn, int64_t plen,
                    int64_t dmalen, int64_t fn, int64_t ts) except -1
    @cython.locals(e=_Held)
    cdef int _release(self, _Flow f, _Msgs st) except -1
    @cython.locals(size=int64_t)
    cdef int _advance(self, _Flow f, _Msgs st, int pos, int kind, uint32_t psn, int64_t plen,
                      int64_t dmalen, int64_t fn, int64_t ts) except -1
    cdef int _abandon(self, _Flow f, _Msgs st, bint has_last, uint32_t last,
                      int kind) except -1
    @cython.locals(j=Py_ssize_t, e=list, hit=bint, size=int64_t)
    cdef int _late(self, _Flow f, _Msgs st, int pos, int kind, uint32_t psn, int64_t plen,
                   int64_t dmalen, int64_t fn, int64_t ts) except -1
    @cython.locals(s=int)
    cdef int _complete(self, _Flow f, int kind, int64_t size, int64_t dmalen, int64_t fn,
                       int64_t ts) except -1
    cdef int _incomplete(self, _Flow f, list e) except -1
    cdef bint _stored(self, str name, int64_t fn) except -1
    @cython.locals(k=int)
    cdef int _event(self, int64_t fn, int64_t ts, str name, _Flow f, object args,
                    int64_t count=*, int64_t last=*) except -1
    @cython.locals(f=_Flow, st=_Msgs, side=int)
    cdef int _close_all(self) except -1
    @cython.locals(s=_Flow)
    cdef list _flows_out(self)
    @cython.locals(mct=_Hist, rtt=_Hist, f=_Flow)
    cdef tuple _latency(self)
