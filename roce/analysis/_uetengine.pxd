# The C types of the UET PDC engine's compiled form.  The engine itself is uetref.py beside this
# file: setup.py compiles that file, unchanged, into roce.analysis._uetengine, and Cython reads
# these declarations as its own (an augmenting .pxd, named after the module it builds).
# Declarations only: no rule is written here.  What is typed:
#   - the numbers the rules switch on as C integers;
#   - the shapes (where the layouts put the fields, per PDS type and flags, per SES header and
#     opcode), the PDC state and a message as final extension types, counters and PSNs as
#     64-bit integers;
#   - the per-packet functions and methods as C functions, with their locals;
#   - the fast path's walk in C (roce/_fastpath.pxd).
# What grows or is rare (holes, PSN sets, the maps by name, the dissector's path) stays Python.
# uetref.py's __slots__ name the attributes declared here (tests/test_uet_engine.py holds them
# equal).

cimport cython
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from roce._fastpath cimport WalkResult, do_walk

cdef int64_t _M32, _HALF, _NS
cdef int _NO_ROUTE, _SLOW, _NSHAPES, _NSES, _RECORD
cdef int _TYPE_SHIFT, _TYPE_MASK, _NH_SHIFT, _NH_MASK, _FLAGS_SHIFT, _FLAGS_MASK
cdef int _TSS, _NH_NONE, _CC_NSCC
cdef int _K_OTHER, _K_REQUEST, _K_ACK, _K_NACK
cdef int _NR_PORT, _NR_PROTO, _L3_IPV4, _L3_IPV6
cdef object _CSWAP

# -- reading a packet, numbers -------------------------------------------------------------------
@cython.locals(o=Py_ssize_t, v=uint64_t, k=int, bits=int, one=uint64_t)
cdef inline uint64_t _read(const uint8_t *p, Py_ssize_t at, int64_t spec) noexcept
@cython.locals(d=int64_t)
cdef inline int64_t _ahead(int64_t a, int64_t b) noexcept
cdef inline int64_t _signed16(int64_t v) noexcept
@cython.locals(w=WalkResult)
cdef inline WalkResult _walk(const uint8_t *p, Py_ssize_t n, int linktype, int udp_port) noexcept
@cython.locals(b0=uint32_t, b1=uint32_t, b2=uint32_t, b3=uint32_t)
cdef inline uint32_t _u32_pcap(const uint8_t *p, Py_ssize_t at, bint big_endian) noexcept

# -- shapes and state ----------------------------------------------------------------------------
@cython.final
cdef class _Pds:
    cdef int kind, size
    cdef bint ses, syn, retx, marked, probe, close, clear
    cdef int64_t s_psn, s_spdcid, s_dpdcid, s_psn_offset, s_pdc_mode, s_cack, s_sack_off
    cdef int64_t s_bitmap, s_cc_type, state_at, s_service, s_rcvd, s_ooo, s_code, s_npsn


@cython.final
cdef class _Ses:
    cdef int64_t size, amo_at, atomic, cswap, s_mid, s_som, s_eom, s_rlen, s_plen


@cython.final
cdef class _Msg:
    cdef int64_t som, eom, ends, nbytes, pkts


@cython.final
cdef class Pdc:
    cdef public str initiator, target
    cdef public int64_t spdcid, dpdcid, first_frame, first_ns, last_ns
    cdef public int64_t requests, request_bytes, unique_bytes, syns, start_psn, pdc_mode
    cdef public int64_t highest_psn, base, highest, retransmissions, spurious
    cdef public object holes
    cdef public list recovered, reordered
    cdef public set seen
    cdef public int64_t acks, first_cack, cack, cack_advances, ecn_marked_acks, probe_acks
    cdef public int64_t sack_holes
    cdef public set sack_missing, sacked
    cdef public int64_t nscc_acks, service_time_max, rcvd_bytes_last, ooo_max
    cdef public dict trims, nacks
    cdef public list nack_psns
    cdef public dict controls
    cdef public int64_t close_requests, clear_requests, close_asked, clear_asked
    cdef public int64_t close_handshakes, clear_handshakes
    cdef public dict open_messages
    cdef public list message_sizes
    cdef public int64_t bin
    cdef public tuple mark


# -- the rules -----------------------------------------------------------------------------------
@cython.locals(ahead=int64_t, u=int64_t, again=bint, m=_Msg)
cdef int _request(Pdc p, int64_t psn, int64_t size, bint syn, int64_t start_psn,
                  int64_t pdc_mode, int64_t dpdcid, bint retx, int64_t mid, bint som,
                  bint eom, bint cut) except -1
cdef inline bint _cut(int64_t size, bint som, bint eom, int64_t request_length,
                      int64_t payload_length) noexcept
cdef bint _acknowledged(Pdc p, int64_t psn) except -1
@cython.locals(holes=bint, top=int, i=int, q=int64_t)
cdef int _ack(Pdc p, int64_t cack, bint marked, bint probe, bint close, bint clear,
              bint has_sack, int64_t sack_base, uint64_t bitmap, bint nscc, int64_t service,
              int64_t rcvd, int64_t ooo) except -1
cdef int _nack(Pdc p, int64_t code, int64_t psn) except -1
cdef int _control(Pdc p, int64_t ct) except -1


# -- the engine ----------------------------------------------------------------------------------
@cython.final
cdef class Engine:
    cdef readonly int udp_port
    cdef public bint fast
    cdef public dict pdcs
    cdef public int64_t packets, encrypted, malformed, unreliable
    cdef public int64_t interval, t0
    cdef public dict bins
    cdef dict _routes, _names
    cdef list _shapes, _ses, _ops

    @cython.locals(q="const uint8_t *", p="const uint8_t *", caplen=int64_t, ts=int64_t,
                   number=int64_t)
    cdef int _records(self, const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end,
                      bint big_endian, int64_t frac_mul, int linktype, int64_t base) except -1
    @cython.locals(w=WalkResult, st=int, code=int64_t, start=Py_ssize_t, end=Py_ssize_t,
                   route=int)
    cdef int _frame(self, object obj, const uint8_t *p, Py_ssize_t n, int64_t number,
                    int64_t ts, int linktype, int64_t origlen) except -1
    @cython.locals(r=int, pos=Py_ssize_t, b0=int, word=int, typ=int, nh=int, flags=int,
                   i=Py_ssize_t, sh=_Pds, body=Py_ssize_t, mid=int64_t, som=bint, eom=bint,
                   cut=bint,
                   o=int64_t, op=int64_t, j=Py_ssize_t, ses=_Ses, top=Py_ssize_t, k=int,
                   key=bytes, names=tuple, src=str, dst=str, psn=int64_t, q=Pdc,
                   cack=int64_t, nscc=bint, spdcid=int64_t, dpdcid=int64_t)
    cdef int _bytes(self, const uint8_t *p, Py_ssize_t start, Py_ssize_t end, int64_t number,
                    int64_t ts, int route, int l3k, Py_ssize_t l3o) except -1
    @cython.locals(key=tuple, p=Pdc)
    cdef Pdc _pdc(self, str initiator, str target, int64_t pdcid, int64_t number, int64_t ts,
                  int64_t other)
    cdef Pdc _ctrl_pdc(self, str src, str dst, int64_t spdcid, int64_t dpdcid, int64_t number,
                       int64_t ts, int64_t ct)
