# The emulator's event queue in C: a binary heap of (int64 time, int64 sequence) keys in one C
# array, each pending event's (time, callback, argument) tuple in a list beside it (one slot per
# pending event, so the cyclic collector sees them).  Twin: roce.emu.net.events.EventQueue
# (heapq of tuples); the same order, ties in time broken by the order of scheduling (hypothesis
# test in tests/test_events.py).  No Python comparison; the tuple made when an event is
# scheduled is the one the loop takes off, so an event costs one list slot written and read.

cdef inline bint _ev_less(EvKey *a, EvKey *b) noexcept nogil:
    # bitwise, not short-circuit: no branch to mispredict (which child is smaller is a coin
    # toss to the CPU)
    return (a.t < b.t) | ((a.t == b.t) & (a.seq < b.seq))


cdef class EventQueue:
    """Twin of roce.emu.net.events.EventQueue (its C attributes are declared in
    _fastpath.pxd)."""

    def __cinit__(self):
        self.heap = NULL
        self.free_slots = NULL
        self.n = self.cap = self.nslots = self.nfree = 0
        self.next_seq = 0
        self.objs = []

    def __dealloc__(self):
        free(self.heap)
        free(self.free_slots)

    def __len__(self):
        return self.n

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self.cap * 2 if self.cap else 64
        cdef EvKey *h = <EvKey *>realloc(self.heap, cap * sizeof(EvKey))
        if h == NULL:
            raise MemoryError()
        self.heap = h
        cdef Py_ssize_t *f = <Py_ssize_t *>realloc(self.free_slots, cap * sizeof(Py_ssize_t))
        if f == NULL:
            raise MemoryError()
        self.free_slots = f
        self.objs.extend([None] * (cap - self.cap))
        self.cap = cap
        return 0

    cpdef at(self, object t, object fn, object arg=None):
        """Schedule ``fn(t, arg)`` at virtual time ``t`` (ns), after everything scheduled
        before it for the same time."""
        cdef Py_ssize_t slot, i, p
        cdef EvKey key
        key.t = t  # (OverflowError past int64, TypeError for what is not an integer)
        if type(t) is not int:
            t = key.t  # an int subclass or an index: the loop hands callbacks an int
        if self.n == self.cap:
            self._grow()
        if self.nfree:
            self.nfree -= 1
            slot = self.free_slots[self.nfree]
        else:
            slot = self.nslots
            self.nslots += 1
        self.objs[slot] = (t, fn, arg)
        key.seq = self.next_seq
        key.slot = slot
        self.next_seq += 1
        i = self.n
        self.n += 1
        while i > 0:
            p = (i - 1) >> 1
            if _ev_less(&key, &self.heap[p]):
                self.heap[i] = self.heap[p]
                i = p
            else:
                break
        self.heap[i] = key

    cdef void _sift_down(self, Py_ssize_t i) noexcept:
        # Floyd's order: the smaller child moves up all the way to a leaf, then the key rises
        # from there.  The key put at the top is the heap's last, which mostly belongs near
        # the bottom: one comparison per level on the way down, a few on the way up, where a
        # sift that tests the key at each level makes two per level.
        cdef EvKey key = self.heap[i]
        cdef Py_ssize_t c, p, n = self.n, top = i
        c = 2 * i + 1
        while c < n:
            if c + 1 < n:
                c += _ev_less(&self.heap[c + 1], &self.heap[c])  # (the smaller: no branch)
            self.heap[i] = self.heap[c]
            i = c
            c = 2 * i + 1
        while i > top:
            p = (i - 1) >> 1
            if _ev_less(&key, &self.heap[p]):
                self.heap[i] = self.heap[p]
                i = p
            else:
                break
        self.heap[i] = key

    cpdef object first(self):
        """The time of the earliest event, None when none is left."""
        if self.n == 0:
            return None
        return self.heap[0].t

    cpdef tuple pop_until(self, int64_t limit):
        """The earliest event as ``(time, callback, argument)``, taken off the queue; None when
        none is left or the earliest lies past ``limit``."""
        if self.n == 0 or self.heap[0].t > limit:
            return None
        cdef Py_ssize_t s = self.heap[0].slot
        cdef tuple ev = self.objs[s]
        self.objs[s] = None
        self.free_slots[self.nfree] = s
        self.nfree += 1
        self.n -= 1
        if self.n:
            self.heap[0] = self.heap[self.n]
            self._sift_down(0)
        return ev

    cpdef tuple pop(self):
        """The earliest event as ``(time, callback, argument)``, taken off the queue."""
        if self.n == 0:
            raise IndexError("pop from an empty event queue")
        return self.pop_until(self.heap[0].t)

    cpdef Py_ssize_t remove(self, object fn) except -1:
        """Take every event whose callback equals ``fn`` off the queue; how many."""
        cdef Py_ssize_t i, j = 0, s, removed = 0
        for i in range(self.n):
            s = self.heap[i].slot
            if (<tuple>self.objs[s])[1] == fn:
                self.objs[s] = None
                self.free_slots[self.nfree] = s
                self.nfree += 1
                removed += 1
            else:
                self.heap[j] = self.heap[i]
                j += 1
        self.n = j
        for i in range(j // 2 - 1, -1, -1):
            self._sift_down(i)
        return removed
