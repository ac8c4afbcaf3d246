# RoCE's one-line text in C: `roce decode`'s line for every frame the fast scan passed,
# straight from the scan columns (roce.fast.SCAN_COLUMNS), with the digit and address writers
# of families/ib/_lines.pxi (one extension).  Twin: the Python loop of
# roce.families.base.summary.Summarizer.fast_lines (hypothesis test in
# tests/test_decode_lines.py).  Every piece of text (opcode names, AETH syndrome words, flag
# suffixes, protocol names) comes from roce.families.base.summary (roce_lines_configure).
# Frames the formatter leaves to Python come back as None: not passed by the scan, several
# extended headers (K_SLOW), AETHs that may be a selective NAK, odd time texts.

from libc.string cimport memcmp

cdef object RL_NAMES = None     # 256 bytes: opcode names (summary.NAMES)
cdef object RL_SYN_PRE = None   # 256 bytes: AETH text before " MSN=" (SYNDROME_PARTS)
cdef object RL_SYN_POST = None  # 256 bytes: AETH text after the MSN
cdef object RL_FLAGS = None     # 64 bytes: flag suffix by summary.FLAGS_BY_BITS's index
cdef object RL_PROTOCOL = None  # 256 bytes or None: protocol column by L3 kind
cdef uint8_t RL_KIND[256]
cdef uint8_t RL_SACK[256]  # AETH syndromes that may be a selective NAK: left to Python
cdef int RL_K_NONE, RL_K_RETH, RL_K_AETH, RL_K_DETH, RL_K_IMM, RL_K_IETH, RL_K_CNP
cdef int RL_FLAG_A, RL_L3_IPV4, RL_SRC4, RL_SRC6
cdef bint RL_READY = False


def roce_lines_configure(dict cfg):
    """Receive the text tables (roce.families.base.summary.configure_lines)."""
    global RL_NAMES, RL_SYN_PRE, RL_SYN_POST, RL_FLAGS, RL_PROTOCOL, RL_READY
    global RL_K_NONE, RL_K_RETH, RL_K_AETH, RL_K_DETH, RL_K_IMM, RL_K_IETH, RL_K_CNP
    global RL_FLAG_A, RL_L3_IPV4, RL_SRC4, RL_SRC6
    cdef int i
    names, pre, post = tuple(cfg["names"]), tuple(cfg["syn_pre"]), tuple(cfg["syn_post"])
    flags, protocol = tuple(cfg["flags"]), tuple(cfg["protocol"])
    if len(names) != 256 or len(pre) != 256 or len(post) != 256 or len(flags) != 64 \
            or len(protocol) != 256:
        raise ValueError("roce_lines_configure: tables of the wrong size")
    # every piece fits the line buffer (roce_lines): none of summary's texts comes near
    for t in (*names, *pre, *post, *flags, *(p for p in protocol if p is not None)):
        if not isinstance(t, bytes) or len(t) > IBL_MAX_PIECE:
            raise ValueError("roce_lines_configure: each text must be bytes of at most 64")
    RL_NAMES, RL_SYN_PRE, RL_SYN_POST, RL_FLAGS, RL_PROTOCOL = names, pre, post, flags, protocol
    for i in range(256):
        RL_KIND[i] = cfg["kinds"][i]
        RL_SACK[i] = 1 if cfg["maybe_sack"][i] else 0
    k = cfg["k"]
    RL_K_NONE, RL_K_RETH, RL_K_AETH = k["none"], k["reth"], k["aeth"]
    RL_K_DETH, RL_K_IMM, RL_K_IETH, RL_K_CNP = k["deth"], k["imm"], k["ieth"], k["cnp"]
    RL_FLAG_A, RL_L3_IPV4, RL_SRC4, RL_SRC6 = cfg["flag_a"], cfg["l3_ipv4"], cfg["src4"], \
        cfg["src6"]
    RL_READY = True


cdef inline Py_ssize_t rl_time(char *tbuf, const char **tt, Py_ssize_t i, list texts,
                               bytes prefix, int64_t base, bint nine,
                               const int64_t *stamps) except -1:
    """Frame ``i``'s time text (``*tt``, its length back): ``texts[i]``, or when ``texts`` is
    None the plan's (``prefix``, ``base``, nine digits or six, ``stamps``) written in
    ``tbuf``; a length over IBL_MAX_TIME where Python writes it (outside the plan's second)."""
    cdef int64_t x
    cdef char *o
    cdef Py_ssize_t tlen
    if texts is not None:
        tt[0] = PyUnicode_AsUTF8AndSize(<object>PyList_GET_ITEM(texts, i), &tlen)
        return tlen
    x = stamps[i] - base
    if x < 0 or x >= 1000000000:
        return IBL_MAX_TIME + 1
    o = ibl_bytes(tbuf, prefix)
    o = ibl_dec0(o, x, 9) if nine else ibl_dec0(o, x // 1000, 6)
    tt[0] = tbuf
    return o - tbuf


def rest_lines(list out, list missing, list rests, Py_ssize_t first_number, list texts,
               tuple times, const uint8_t[::1] status):
    """The lines of the frames of ``missing`` (indexes into a batch whose lines are ``out``,
    as ``roce_lines`` left them) that the scan did not pass (``status``: not 0, the frames
    Python's lines hand to ``slow``) and whose text after the time column another family
    made (``rests[i]``, a str; None: Python makes the line): number, time, that text, put
    into ``out``; back, the indexes still missing.  The time column as ``roce_lines`` takes
    it.  Twin: the f-string of ``roce.cli.decode``'s per-frame path."""
    cdef const int64_t[::1] stamps = None
    cdef bytes prefix = b""
    cdef int64_t base = 0
    cdef bint nine = True
    cdef char tbuf[IBL_MAX_TIME + 32]
    cdef char buf[IBL_MAX_TIME + 64]
    cdef const char *tt = NULL
    cdef char *o
    cdef Py_ssize_t i, tlen, n = PyList_GET_SIZE(out)
    cdef const int64_t *sp = NULL
    if texts is None:
        prefix, base, digits, stamps = times
        nine = digits == 9
        if len(prefix) > IBL_MAX_TIME:
            raise ValueError("rest_lines: bad time plan")
        if stamps.shape[0]:
            sp = &stamps[0]
    left = []
    for j in missing:
        i = j
        if i < 0 or i >= n or i >= PyList_GET_SIZE(rests) or i >= status.shape[0] or (
                texts is None and i >= stamps.shape[0]) or (
                texts is not None and i >= PyList_GET_SIZE(texts)):
            raise IndexError("rest_lines: a frame outside the batch")
        rest = <object>PyList_GET_ITEM(rests, i)
        if rest is None or not status[i]:
            left.append(j)
            continue
        tlen = rl_time(tbuf, &tt, i, texts, prefix, base, nine, sp)
        if tlen > IBL_MAX_TIME:
            left.append(j)
            continue
        o = ibl_dec(buf, first_number + i, 5)
        o[0] = 32
        memcpy(o + 1, tt, tlen)
        o += 1 + tlen
        o[0] = 32
        out[i] = PyUnicode_DecodeUTF8(buf, o + 1 - buf, NULL) + <str>rest
    return left


def roce_lines(list datas, dict cols, Py_ssize_t n, Py_ssize_t first_number, list texts,
               list origlens, bytes arrow, tuple times=None):
    """(lines, missing): lines for frames 0..n-1 of a batch scanned by ``scan``, numbered
    from first_number; None where Python makes the line, those indexes in ``missing``.  The
    time column is ``texts``, or, when ``texts`` is None, ``times``: (the seconds and the
    point as bytes, base ns, digits, the frames' int64 time stamps), as ``ib_lines`` takes
    it."""
    cdef const int64_t[::1] stamps = None
    cdef bytes prefix = b""
    cdef int64_t base = 0, x
    cdef bint nine = True
    cdef char tbuf[IBL_MAX_TIME + 32]
    if not RL_READY:
        raise RuntimeError("roce_lines: roce_lines_configure was not called")
    cdef const int64_t *sp = NULL
    if texts is None:
        prefix, base, digits, stamps = times
        nine = digits == 9
        if len(prefix) > IBL_MAX_TIME or stamps.shape[0] < n:
            raise ValueError("roce_lines: bad time plan")
        if n:
            sp = &stamps[0]
    elif n > PyList_GET_SIZE(texts):
        raise ValueError("roce_lines: fewer time texts than n")
    if n > PyList_GET_SIZE(datas) or n > PyList_GET_SIZE(origlens):
        raise ValueError("roce_lines: fewer frames or lengths than n")
    cdef uint8_t[::1] c_status = cols["status"]
    cdef uint8_t[::1] c_l3 = cols["l3_kind"]
    cdef int32_t[::1] c_l3_off = cols["l3_off"]
    cdef uint8_t[::1] c_opcode = cols["opcode"]
    cdef uint32_t[::1] c_destqp = cols["destqp"]
    cdef uint32_t[::1] c_psn = cols["psn"]
    cdef uint8_t[::1] c_flags = cols["flags"]
    cdef uint8_t[::1] c_ecn = cols["ecn"]
    cdef uint64_t[::1] c_k0 = cols["key0"]
    cdef uint64_t[::1] c_k1 = cols["key1"]
    cdef uint64_t[::1] c_k2 = cols["key2"]
    cdef uint8_t[::1] c_icrc = cols["icrc_ok"]
    if c_status.shape[0] < n:
        raise ValueError("roce_lines: columns shorter than n")
    if len(arrow) > IBL_MAX_PIECE:
        return [None] * n, list(range(n))  # an arrow this long: Python makes every line
    cdef char buf[1024]
    cdef char src[64]
    cdef char dst[64]
    cdef uint8_t last[32]  # the addresses src and dst are the text of (frames repeat them)
    cdef int last_l3 = -1, size
    cdef char *o
    cdef const char *tt
    cdef Py_ssize_t i, tlen
    cdef int op, kind, ns = 0, nd = 0, l3
    cdef const uint8_t *p
    cdef object f, line, proto
    out = PyList_New(n)
    missing = []
    for i in range(n):
        op = c_opcode[i]
        kind = RL_KIND[op]
        l3 = c_l3[i]
        line = None
        proto = <object>PyTuple_GET_ITEM(RL_PROTOCOL, l3)
        if not c_status[i] and proto is not None and (
                kind == RL_K_NONE or kind == RL_K_RETH
                or (kind == RL_K_AETH and not RL_SACK[c_k0[i] & 255])
                or kind == RL_K_CNP or kind == RL_K_DETH or kind == RL_K_IMM
                or kind == RL_K_IETH):
            tlen = rl_time(tbuf, &tt, i, texts, prefix, base, nine, sp)
            if tlen <= IBL_MAX_TIME:
                f = <object>PyList_GET_ITEM(datas, i)
                p = <const uint8_t *>PyBytes_AS_STRING(f) + c_l3_off[i]
                if l3 == RL_L3_IPV4:
                    p += RL_SRC4
                    size = 4
                else:
                    p += RL_SRC6
                    size = 16
                if l3 != last_l3 or memcmp(p, last, 2 * size) != 0:
                    inet_ntop(AF_INET if size == 4 else AF_INET6, p, src, 64)
                    inet_ntop(AF_INET if size == 4 else AF_INET6, p + size, dst, 64)
                    ns, nd = <int>strlen(src), <int>strlen(dst)
                    memcpy(last, p, 2 * size)
                    last_l3 = l3
                o = ibl_dec(buf, first_number + i, 5)
                o[0] = 32
                memcpy(o + 1, tt, tlen)
                o += 1 + tlen
                o[0] = 32
                o = ibl_pad(o + 1, src, ns, 12, True)
                o[0] = 32
                o = ibl_bytes(o + 1, arrow)
                o[0] = 32
                o = ibl_pad(o + 1, dst, nd, 12, False)
                o[0] = 32
                o = ibl_bytes(o + 1, proto)
                o[0] = 32
                o = ibl_dec(o + 1, <object>PyList_GET_ITEM(origlens, i), 0)
                o[0] = 32
                o = ibl_bytes(o + 1, <object>PyTuple_GET_ITEM(RL_NAMES, op))
                o = ibl_cstr(o, b" QP=0x")
                o = ibl_hex(o, c_destqp[i], 6)
                if kind != RL_K_CNP:
                    o = ibl_cstr(o, b" PSN=")
                    o = ibl_dec(o, c_psn[i], 0)
                if kind == RL_K_RETH:
                    o = ibl_cstr(o, b" VA=0x")
                    o = ibl_hex(o, c_k0[i], 0)
                    o = ibl_cstr(o, b" RKey=0x")
                    o = ibl_hex(o, c_k1[i], 8)
                    o = ibl_cstr(o, b" Len=")
                    o = ibl_dec(o, c_k2[i], 0)
                elif kind == RL_K_AETH:
                    o[0] = 32
                    o = ibl_bytes(o + 1, <object>PyTuple_GET_ITEM(RL_SYN_PRE, c_k0[i] & 255))
                    o = ibl_cstr(o, b" MSN=")
                    o = ibl_dec(o, c_k1[i], 0)
                    o = ibl_bytes(o, <object>PyTuple_GET_ITEM(RL_SYN_POST, c_k0[i] & 255))
                elif kind == RL_K_DETH:
                    o = ibl_cstr(o, b" QKey=0x")
                    o = ibl_hex(o, c_k0[i], 8)
                    o = ibl_cstr(o, b" SrcQP=0x")
                    o = ibl_hex(o, c_k1[i], 6)
                elif kind == RL_K_IMM:
                    o = ibl_cstr(o, b" ImmDt=0x")
                    o = ibl_hex(o, c_k0[i], 8)
                elif kind == RL_K_IETH:
                    o = ibl_cstr(o, b" InvRKey=0x")
                    o = ibl_hex(o, c_k0[i], 8)
                o = ibl_bytes(o, <object>PyTuple_GET_ITEM(
                    RL_FLAGS, (c_flags[i] & RL_FLAG_A) | ((c_ecn[i] & 3) << 3)
                    | ((1 if c_icrc[i] else 0) << 5)))
                line = PyUnicode_DecodeUTF8(buf, o - buf, NULL)
        if line is None:
            missing.append(i)
        Py_INCREF(line)
        PyList_SET_ITEM(out, i, line)
    return out, missing
