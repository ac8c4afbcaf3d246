# Native InfiniBand one-line text in C: `roce decode`'s line for every frame the IB scan
# passed, straight from the scan columns (roce.families.ib.native.SCAN_COLUMNS).  Twin:
# roce.families.ib.lines.format_reference (hypothesis test in tests/test_iblines.py).  Every
# piece of text (opcode names, AETH syndrome words, flag suffixes, the protocol name) comes
# from roce.families.ib.lines (ib_lines_configure), which takes it from roce.families.base.summary.
# Frames the formatter leaves to Python come back as None: not passed by the scan, UD
# (MADs, CM, IPoIB have their own Info), several extended headers (K_SLOW), AETHs that may be
# a selective NAK (summary.aeth_text), odd time texts.

from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.list cimport PyList_New, PyList_SET_ITEM

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef object IBL_NAMES = None       # 256 bytes: opcode names (summary.NAMES)
cdef object IBL_SYN_PRE = None     # 256 bytes: AETH text before " MSN=" (SYNDROME_PARTS)
cdef object IBL_SYN_POST = None    # 256 bytes: AETH text after the MSN
cdef object IBL_FLAGS = None       # 32 bytes: flag suffix by ibflags.flag_index (IB_FLAG_TEXT)
cdef object IBL_PROTOCOL = None
cdef uint8_t IBL_KIND[256]
cdef uint8_t IBL_UD[256]
cdef uint8_t IBL_SACK[256]  # AETH syndromes that may be a selective NAK: left to Python
cdef int IBL_K_NONE, IBL_K_RETH, IBL_K_AETH, IBL_K_DETH, IBL_K_IMM, IBL_K_IETH, IBL_K_CNP
cdef int IBL_FLAG_A, IBL_FLAG_FECN, IBL_FLAG_BECN, IBL_LNH_GLOBAL, IBL_GID_SRC
cdef bint IBL_READY = False
DEF IBL_MAX_TIME = 200  # longer time texts (none the time column makes) go to Python
DEF IBL_MAX_PIECE = 64  # longest table text or arrow: the 1024-byte line buffer holds a line


def ib_lines_configure(dict cfg):
    """Receive the text tables (roce.families.ib.lines.configure)."""
    global IBL_NAMES, IBL_SYN_PRE, IBL_SYN_POST, IBL_FLAGS, IBL_PROTOCOL
    global IBL_K_NONE, IBL_K_RETH, IBL_K_AETH, IBL_K_DETH, IBL_K_IMM, IBL_K_IETH, IBL_K_CNP
    global IBL_FLAG_A, IBL_FLAG_FECN, IBL_FLAG_BECN, IBL_LNH_GLOBAL, IBL_GID_SRC, IBL_READY
    cdef int i
    IBL_NAMES = tuple(cfg["names"])
    IBL_SYN_PRE = tuple(cfg["syn_pre"])
    IBL_SYN_POST = tuple(cfg["syn_post"])
    IBL_FLAGS = tuple(cfg["flags"])
    if len(IBL_NAMES) != 256 or len(IBL_SYN_PRE) != 256 or len(IBL_SYN_POST) != 256 \
            or len(IBL_FLAGS) != 32:
        raise ValueError("ib_lines_configure: tables of the wrong size")
    IBL_PROTOCOL = cfg["protocol"]
    # every piece fits the line buffer (ib_lines): none of summary's texts comes near
    for t in (*IBL_NAMES, *IBL_SYN_PRE, *IBL_SYN_POST, *IBL_FLAGS, IBL_PROTOCOL):
        if not isinstance(t, bytes) or len(t) > IBL_MAX_PIECE:
            raise ValueError("ib_lines_configure: each text must be bytes of at most 64")
    for i in range(256):
        IBL_KIND[i] = cfg["kinds"][i]
        IBL_UD[i] = 1 if i in cfg["ud"] else 0
        IBL_SACK[i] = 1 if cfg["maybe_sack"][i] else 0
    k = cfg["k"]
    IBL_K_NONE, IBL_K_RETH, IBL_K_AETH = k["none"], k["reth"], k["aeth"]
    IBL_K_DETH, IBL_K_IMM, IBL_K_IETH, IBL_K_CNP = k["deth"], k["imm"], k["ieth"], k["cnp"]
    IBL_FLAG_A, IBL_FLAG_FECN, IBL_FLAG_BECN = cfg["flag_a"], cfg["flag_fecn"], cfg["flag_becn"]
    IBL_LNH_GLOBAL = cfg["lnh_global"]
    IBL_GID_SRC = cfg["gid_src"]
    IBL_READY = True


cdef inline char *ibl_bytes(char *o, object b) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    memcpy(o, PyBytes_AS_STRING(b), n)
    return o + n


cdef inline char *ibl_cstr(char *o, const char *s) noexcept nogil:
    while s[0]:
        o[0] = s[0]
        o += 1
        s += 1
    return o


cdef inline int ibl_dec_into(char *tmp, uint64_t v) noexcept nogil:
    """Decimal digits of v at the end of tmp[0:20]; returns how many."""
    cdef int k = 20
    while True:
        k -= 1
        tmp[k] = <char>(48 + v % 10)
        v //= 10
        if v == 0:
            break
    return 20 - k


cdef inline char *ibl_dec(char *o, uint64_t v, int width) noexcept nogil:
    """v in decimal, right-aligned in ``width`` (Python's f"{v:{width}d}")."""
    cdef char tmp[20]
    cdef int n = ibl_dec_into(tmp, v)
    while width > n:
        o[0] = 32
        o += 1
        width -= 1
    memcpy(o, tmp + 20 - n, n)
    return o + n


cdef inline char *ibl_dec0(char *o, uint64_t v, int width) noexcept nogil:
    """v in decimal, zero-padded to ``width`` (Python's "%0{width}d")."""
    cdef char tmp[20]
    cdef int n = ibl_dec_into(tmp, v)
    while width > n:
        o[0] = 48
        o += 1
        width -= 1
    memcpy(o, tmp + 20 - n, n)
    return o + n


cdef inline char *ibl_hex(char *o, uint64_t v, int width) noexcept nogil:
    """v in lower-case hex, zero-padded to ``width`` (Python's f"{v:0{width}x}")."""
    cdef char tmp[16]
    cdef int k = 16
    while True:
        k -= 1
        tmp[k] = b"0123456789abcdef"[v & 15]
        v >>= 4
        if v == 0:
            break
    while width > 16 - k:
        o[0] = 48
        o += 1
        width -= 1
    memcpy(o, tmp + k, 16 - k)
    return o + 16 - k


cdef inline char *ibl_pad(char *o, const char *s, int n, int width, bint right) noexcept nogil:
    """s (n bytes, ASCII) aligned in ``width``: right (Python's >) or left (<)."""
    if right:
        while width > n:
            o[0] = 32
            o += 1
            width -= 1
    memcpy(o, s, n)
    o += n
    if not right:
        while width > n:
            o[0] = 32
            o += 1
            width -= 1
    return o


cdef inline int ibl_address(char *out, const uint8_t *p, bint grh, int gid_off,
                            uint16_t lid) noexcept:
    """A Source/Destination column: the GID (inet_ntop, as Python's socket.inet_ntop) or
    ``LID: n``; returns its length."""
    cdef char *o
    if grh:
        if inet_ntop(AF_INET6, p + gid_off, out, 64) == NULL:
            return 0
        return <int>strlen(out)
    o = ibl_cstr(out, b"LID: ")
    o = ibl_dec(o, lid, 0)
    return <int>(o - out)


def ib_lines(list datas, dict cols, Py_ssize_t n, Py_ssize_t first_number, list texts,
             list origlens, bytes arrow, tuple times=None):
    """(lines, missing): lines for frames 0..n-1 of a batch scanned by ib_scan, numbered
    from first_number; None where Python makes the line, those indexes in ``missing``.
    The time column is ``texts``, or, when ``texts`` is None, ``times``: (the seconds and
    the point as bytes, base ns, digits, the frames' int64 time stamps), each text the
    seconds then the nanoseconds since base, 9 digits (or microseconds, 6 digits), as
    roce.families.base.summary.TimeColumn._relative writes them."""
    cdef const int64_t[::1] stamps
    cdef bytes prefix = b""
    cdef int64_t base = 0, x
    cdef bint nine = True
    cdef char tbuf[IBL_MAX_TIME + 32]
    if not IBL_READY:
        raise RuntimeError("ib_lines: ib_lines_configure was not called")
    if texts is None:
        prefix, base, digits, stamps = times
        nine = digits == 9
        if len(prefix) > IBL_MAX_TIME or stamps.shape[0] < n:
            raise ValueError("ib_lines: bad time plan")
    elif n > PyList_GET_SIZE(texts):
        raise ValueError("ib_lines: fewer time texts than n")
    if n > PyList_GET_SIZE(datas) or n > PyList_GET_SIZE(origlens):
        raise ValueError("ib_lines: fewer frames or lengths than n")
    cdef uint8_t[::1] c_status = cols["status"]
    cdef uint8_t[::1] c_lnh = cols["lnh"]
    cdef uint8_t[::1] c_opcode = cols["opcode"]
    cdef uint32_t[::1] c_destqp = cols["destqp"]
    cdef uint32_t[::1] c_psn = cols["psn"]
    cdef uint8_t[::1] c_flags = cols["flags"]
    cdef uint16_t[::1] c_dlid = cols["dlid"]
    cdef uint16_t[::1] c_slid = cols["slid"]
    cdef uint64_t[::1] c_k0 = cols["key0"]
    cdef uint64_t[::1] c_k1 = cols["key1"]
    cdef uint64_t[::1] c_k2 = cols["key2"]
    cdef uint8_t[::1] c_icrc = cols["icrc_ok"]
    cdef uint8_t[::1] c_vcrc = cols["vcrc_ok"]
    if c_status.shape[0] < n:
        raise ValueError("ib_lines: columns shorter than n")
    if len(arrow) > IBL_MAX_PIECE:
        return [None] * n, list(range(n))  # an arrow this long: Python makes every line
    cdef char buf[1024]
    cdef char src[64]
    cdef char dst[64]
    cdef char *o
    cdef const char *tt
    cdef Py_ssize_t i, tlen
    cdef int op, kind, ns, nd, gid
    cdef bint grh
    cdef const uint8_t *p
    cdef object f, line
    out = PyList_New(n)
    missing = []
    for i in range(n):
        op = c_opcode[i]
        kind = IBL_KIND[op]
        line = None
        if not c_status[i] and not IBL_UD[op] and (
                kind == IBL_K_NONE or kind == IBL_K_RETH
                or (kind == IBL_K_AETH and not IBL_SACK[c_k0[i] & 255])
                or kind == IBL_K_CNP or kind == IBL_K_DETH or kind == IBL_K_IMM
                or kind == IBL_K_IETH):
            if texts is None:
                x = stamps[i] - base
                o = ibl_bytes(tbuf, prefix)
                if x < 0 or x >= 1000000000:  # outside the plan's second: Python's text
                    tlen = IBL_MAX_TIME + 1
                else:
                    o = ibl_dec0(o, x, 9) if nine else ibl_dec0(o, x // 1000, 6)
                    tlen = o - tbuf
                    tt = tbuf
            else:
                tt = PyUnicode_AsUTF8AndSize(<object>PyList_GET_ITEM(texts, i), &tlen)
            if tlen <= IBL_MAX_TIME:
                f = <object>PyList_GET_ITEM(datas, i)
                p = <const uint8_t *>PyBytes_AS_STRING(f)
                grh = c_lnh[i] == IBL_LNH_GLOBAL
                ns = ibl_address(src, p, grh, IBL_GID_SRC, c_slid[i])
                nd = ibl_address(dst, p, grh, IBL_GID_SRC + 16, c_dlid[i])
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
                o = ibl_bytes(o + 1, IBL_PROTOCOL)
                o[0] = 32
                o = ibl_dec(o + 1, <object>PyList_GET_ITEM(origlens, i), 0)
                o[0] = 32
                o = ibl_bytes(o + 1, <object>PyTuple_GET_ITEM(IBL_NAMES, op))
                o = ibl_cstr(o, b" QP=0x")
                o = ibl_hex(o, c_destqp[i], 6)
                if kind != IBL_K_CNP:
                    o = ibl_cstr(o, b" PSN=")
                    o = ibl_dec(o, c_psn[i], 0)
                if kind == IBL_K_RETH:
                    o = ibl_cstr(o, b" VA=0x")
                    o = ibl_hex(o, c_k0[i], 0)
                    o = ibl_cstr(o, b" RKey=0x")
                    o = ibl_hex(o, c_k1[i], 8)
                    o = ibl_cstr(o, b" Len=")
                    o = ibl_dec(o, c_k2[i], 0)
                elif kind == IBL_K_AETH:
                    o[0] = 32
                    o = ibl_bytes(o + 1, <object>PyTuple_GET_ITEM(IBL_SYN_PRE, c_k0[i] & 255))
                    o = ibl_cstr(o, b" MSN=")
                    o = ibl_dec(o, c_k1[i], 0)
                    o = ibl_bytes(o, <object>PyTuple_GET_ITEM(IBL_SYN_POST, c_k0[i] & 255))
                elif kind == IBL_K_DETH:
                    o = ibl_cstr(o, b" QKey=0x")
                    o = ibl_hex(o, c_k0[i], 8)
                    o = ibl_cstr(o, b" SrcQP=0x")
                    o = ibl_hex(o, c_k1[i], 6)
                elif kind == IBL_K_IMM:
                    o = ibl_cstr(o, b" ImmDt=0x")
                    o = ibl_hex(o, c_k0[i], 8)
                elif kind == IBL_K_IETH:
                    o = ibl_cstr(o, b" InvRKey=0x")
                    o = ibl_hex(o, c_k0[i], 8)
                o = ibl_bytes(o, <object>PyTuple_GET_ITEM(
                    IBL_FLAGS, (1 if c_flags[i] & IBL_FLAG_A else 0)
                    | (2 if c_flags[i] & IBL_FLAG_FECN else 0)
                    | (4 if c_flags[i] & IBL_FLAG_BECN else 0)
                    | (0 if c_icrc[i] else 8) | (0 if c_vcrc[i] else 16)))
                line = PyUnicode_DecodeUTF8(buf, o - buf, NULL)
        if line is None:
            missing.append(i)
        Py_INCREF(line)
        PyList_SET_ITEM(out, i, line)
    return out, missing
