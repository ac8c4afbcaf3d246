# Bulk field extraction into column buffers (included by _fastpath.pyx).
# Twin: roce.decoder.colscan.extract_reference; hypothesis test: tests/test_columnar.py.
# The caller hands the field positions (derived from roce.headers.LAYOUTS by colscan), so
# nothing here knows a layout.

DEF NSLOTS = 32
DEF X_INT = 0
DEF X_RAW = 1


def extract(list frames, int linktype, int udp_port, list specs, list values, list valid,
            int vlan2_slot, uint8_t[::1] status, int32_t[::1] paylen, uint32_t[::1] icrc,
            uint8_t[::1] icrc_ok, bint check_icrc):
    """Walk every frame and copy the fields ``specs`` name into columns.  Twin:
    ``roce.decoder.colscan.extract_reference``.

    ``specs[k]`` is (slot, byte offset in the header, bytes, shift, mask, kind): the slot is
    the header id of ``roce.locate.HEADER_IDS`` (``vlan2_slot`` for a second VLAN tag), kind
    0 writes ``(big-endian bytes >> shift) & mask`` into the uint64 buffer ``values[k]``,
    kind 1 copies the bytes into ``values[k]`` at ``row * bytes``.  ``valid[k]`` is an
    Arrow validity bitmap (LSB first), set where the frame is whole RoCE (walk status OK) and
    carries that header; it is cleared here first.  Per frame: walk status, payload length
    (-1 when not OK), stored ICRC and, with ``check_icrc``, whether it is right.
    """
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef Py_ssize_t nspec = len(specs)
    cdef WalkResult w
    cdef const uint8_t *p
    cdef object f
    cdef int k, j, op, pos, l2, slot
    cdef int base[NSLOTS]
    cdef int *s_slot
    cdef int *s_off
    cdef int *s_n
    cdef int *s_shift
    cdef int *s_kind
    cdef uint64_t *s_mask
    cdef uint8_t **s_out
    cdef uint8_t **s_valid
    cdef uint8_t[::1] view
    if status.shape[0] < count or paylen.shape[0] < count or icrc.shape[0] < count \
            or icrc_ok.shape[0] < count:
        raise ValueError("extract: a per-frame column is shorter than frames")
    if len(values) != nspec or len(valid) != nspec:
        raise ValueError("extract: one value buffer and one bitmap per spec")
    if not 0 <= vlan2_slot < NSLOTS:
        raise ValueError("extract: vlan2 slot out of range")
    s_slot = <int *>malloc((nspec + 1) * sizeof(int))
    s_off = <int *>malloc((nspec + 1) * sizeof(int))
    s_n = <int *>malloc((nspec + 1) * sizeof(int))
    s_shift = <int *>malloc((nspec + 1) * sizeof(int))
    s_kind = <int *>malloc((nspec + 1) * sizeof(int))
    s_mask = <uint64_t *>malloc((nspec + 1) * sizeof(uint64_t))
    s_out = <uint8_t **>malloc((nspec + 1) * sizeof(uint8_t *))
    s_valid = <uint8_t **>malloc((nspec + 1) * sizeof(uint8_t *))
    try:
        if not (s_slot and s_off and s_n and s_shift and s_kind and s_mask and s_out
                and s_valid):
            raise MemoryError()
        for k in range(nspec):
            slot, s_off[k], s_n[k], s_shift[k], s_mask[k], s_kind[k] = specs[k]
            if not 0 <= slot < NSLOTS or s_off[k] < 0 or not 0 < s_n[k] or (
                    s_kind[k] == X_INT and s_n[k] > 8) or s_kind[k] not in (X_INT, X_RAW):
                raise ValueError("extract: bad spec %r" % (specs[k],))
            s_slot[k] = slot
            view = values[k]
            if view.shape[0] < count * (8 if s_kind[k] == X_INT else s_n[k]):
                raise ValueError("extract: value buffer %d too short" % k)
            s_out[k] = &view[0] if view.shape[0] else NULL
            view = valid[k]
            if view.shape[0] < (count + 7) // 8:
                raise ValueError("extract: bitmap %d too short" % k)
            if view.shape[0]:
                memset(&view[0], 0, view.shape[0])
            s_valid[k] = &view[0] if view.shape[0] else NULL
        for i in range(count):
            f = <object>PyList_GET_ITEM(frames, i)
            if not PyBytes_Check(f):
                raise TypeError("extract: frame %d is not bytes" % i)
            p = <const uint8_t *>PyBytes_AS_STRING(f)
            do_walk(p, PyBytes_GET_SIZE(f), linktype, udp_port, &w)
            status[i] = w.status
            paylen[i] = -1
            icrc[i] = 0
            icrc_ok[i] = 0
            for k in range(nspec):
                if s_kind[k] == X_INT:
                    (<uint64_t *>s_out[k])[i] = 0
                else:
                    memset(s_out[k] + i * s_n[k], 0, s_n[k])
            if w.status != S_OK:
                continue
            for j in range(NSLOTS):
                base[j] = -1
            l2 = 0
            if linktype == LT_ETH:
                base[H_ETH] = 0
                l2 = SZ_ETH
            elif linktype == LT_SLL:
                base[H_SLL] = 0
                l2 = SZ_SLL
            elif linktype == LT_SLL2:
                base[H_SLL2] = 0
                l2 = SZ_SLL2
            if w.vlans >= 1:
                base[H_VLAN] = l2
            if w.vlans >= 2:
                base[vlan2_slot] = l2 + SZ_VLAN
            base[H_IP if w.l3_kind == 4 else H_IP6 if w.l3_kind == 6 else H_GRH] = w.l3_off
            if w.udp_off >= 0:
                base[H_UDP] = w.udp_off
            base[H_BTH] = w.bth_off
            op = w.opcode
            pos = w.bth_off + SZ_BTH
            for j in range(OP_NEXT[op]):
                base[OP_HID[op][j]] = pos
                pos += OP_HSZ[op][j]
            paylen[i] = w.pad_off - w.payload_off
            icrc[i] = stored(p, w.icrc_off)
            if check_icrc:
                icrc_ok[i] = bswap32(icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off,
                                              w.icrc_off)) == icrc[i]
            for k in range(nspec):
                pos = base[s_slot[k]]
                if pos < 0:
                    continue
                s_valid[k][i >> 3] |= <uint8_t>(1 << (i & 7))
                if s_kind[k] == X_INT:
                    (<uint64_t *>s_out[k])[i] = (rd64(p + pos + s_off[k], s_n[k])
                                                 >> s_shift[k]) & s_mask[k]
                else:
                    memcpy(s_out[k] + i * s_n[k], p + pos + s_off[k], s_n[k])
        return count
    finally:
        free(s_slot)
        free(s_off)
        free(s_n)
        free(s_shift)
        free(s_kind)
        free(s_mask)
        free(s_out)
        free(s_valid)
