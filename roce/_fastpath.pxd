# The fast path's C interface to other compiled modules (a cimport reaches these in C).
# Two readers: the compiled flow engine (roce/analysis/_flowengine.pxd, the build's form of
# roce/analysis/flowref.py) walks frames, checks ICRCs and VCRCs and sequences PSNs with them;
# the compiled emulator's loop and wires schedule on ``EventQueue``.  Declarations only: the
# definitions are in _fastpath.pyx and the .pxi files it includes; Cython holds the two to one
# signature.

from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t


cdef struct WalkResult:
    int status
    int vlans
    int l3_kind
    int l3_off
    int l3_len
    int udp_off
    int bth_off
    int opcode
    int payload_off
    int pad_off
    int icrc_off
    int l4_end
    int err_header
    int err_offset
    int err_a
    int err_b


# roce.locate.walk in C: where each header of a frame starts, or why it is not RoCE
cdef int do_walk(const uint8_t *p, int n, int linktype, int udp_port,
                 WalkResult *w) noexcept nogil
# the ICRC of a walked frame, as stored little-endian (roce.icrc.icrc_at byte-swapped)
cdef uint32_t icrc_raw(const uint8_t *p, int l3_off, int l3_kind, int l3_len, int bth_off,
                       int end) noexcept nogil
# native InfiniBand's VCRC over p[:n] (twin of roce.families.ib.crc.vcrc; its polynomial
# arrives with ib_configure, when roce.families.ib.crc is imported)
cdef uint16_t vcrc_raw(const uint8_t *p, Py_ssize_t n) noexcept nogil


cdef class PSNTracker:
    # the twin of roce.psn.PSNTracker
    cdef public uint32_t next, first, early
    cdef public bint started
    cdef public long in_order, gaps, missing, late, duplicates, wraps
    cdef uint32_t *hole_start
    cdef uint32_t *hole_len
    cdef int nholes, cap

    cdef int _reserve(self) except -1
    cpdef int feed(self, uint32_t psn, int count=*)
    cdef bint _early(self, uint32_t psn, int count) except -1
    cpdef bint start_at(self, uint32_t psn) except -1
    cdef int _back(self, uint32_t psn, uint32_t start, uint32_t hole) except -1
    cdef void _advance(self, uint32_t psn, int count) noexcept
    cdef void _drop(self, int i) noexcept
    cdef bint _fill(self, uint32_t psn) except -1
    cpdef bint missing_below(self, uint32_t psn, int64_t floor=*)


cdef struct EvKey:
    int64_t t
    int64_t seq
    Py_ssize_t slot


cdef class EventQueue:
    # the twin of roce.emu.net.events.EventQueue (emu/net/_events.pxi): the emulator's loop
    cdef EvKey *heap
    cdef Py_ssize_t *free_slots
    cdef Py_ssize_t n, cap, nslots, nfree
    cdef int64_t next_seq
    cdef list objs  # slot -> the event's (time, callback, argument)

    cdef int _grow(self) except -1
    cpdef at(self, object t, object fn, object arg=*)
    cdef void _sift_down(self, Py_ssize_t i) noexcept
    cpdef object first(self)
    cpdef tuple pop_until(self, int64_t limit)
    cpdef tuple pop(self)
    cpdef Py_ssize_t remove(self, object fn) except -1

# what the compiled emulator's frames call per packet (roce.emu.core.frames imports them from
# roce.fast, whose names they are when the fast path is built; _compiled.C_FUNCTIONS)
cpdef assemble(bytes l2, bytes l3, int l3_kind, bytes udp, bytes transport, icrc,
               bytes trailer, bint fix_l3_len, bint fix_checksum, bint fix_udp_len,
               bytes body=*, Py_ssize_t body_at=*, Py_ssize_t body_len=*)
cpdef bth_pack(int opcode, bint se, int padcnt, int p_key, int destqp, bint ackreq, int psn)
cpdef bint same_bytes(bytes a, Py_ssize_t a_at, bytes b, Py_ssize_t b_at,
                      Py_ssize_t n) except -1
cpdef rx(bytes frame, bint check_icrc=*, int linktype=*, int udp_port=*)
# a switch hop's rewrite (roce.emu.net.switch imports it from roce.emu.net.hop, whose name it
# is when the fast path is built)
cpdef routed(bytes frame, bytes src_mac, bytes dst_mac, bint mark_ce)
# a wire's serialization clock (roce.emu.net.link imports it from roce.emu.net.serial)
cpdef serial_end(start, bits, num, den)
