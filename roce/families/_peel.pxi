# Tunnels peeled in C for the one-line path and `roce stats`, by the registry's rules: every
# tunnel whose Handler.skip is a roce.families.handler.SkipRule (GRE, ERSPAN II/III, VXLAN and
# any plugin's declared the same way).  Twin: roce.families.peel.peel_reference (hypothesis
# test in tests/test_families.py).  roce.families.peel hands over the rules and the rows of
# the tables that lead to them before each batch; nothing here knows a tunnel by name.

DEF MAXROWS = 32
DEF MAXRULES = 16
DEF MAXCHECKS = 4
DEF MAXEXTRAS = 4
DEF MAXDIRECT = 8

cdef int PR_N = 0, PT_N = 0, GR_N = 0, RULES_N = 0
cdef int PR_VAL[MAXROWS]
cdef int PR_RULE[MAXROWS]
cdef int PT_VAL[MAXROWS]
cdef int PT_RULE[MAXROWS]
cdef int GR_VAL[MAXROWS]
cdef int GR_RULE[MAXROWS]
# one rule per tunnel (SkipRule's fields); its next table: 0 none, 1 ip.proto, 2 udp.port,
# 3 gre.proto
cdef int R_SIZE[MAXRULES]
cdef int R_NCHK[MAXRULES]
cdef int R_CHK[MAXRULES][MAXCHECKS][3]
cdef int R_NEXT_N[MAXRULES]
cdef int R_EXTRA[MAXRULES][MAXEXTRAS][3]
cdef int R_INNER[MAXRULES]
cdef int R_NEXT_AT[MAXRULES]
cdef int R_NDIR[MAXRULES]
cdef int R_DIR[MAXRULES][MAXDIRECT][4]
cdef int R_TABLE[MAXRULES]

PEEL_TABLES = {"ip.proto": 1, "udp.port": 2, "gre.proto": 3}
PEEL_LIMITS = {"rows": MAXROWS, "rules": MAXRULES, "checks": MAXCHECKS, "extras": MAXEXTRAS,
               "direct": MAXDIRECT}


def peel_configure(dict cfg):
    """``cfg["rules"]``: (size, checks, extras, inner, next_at, direct, table) per rule, as
    ``SkipRule`` holds them; ``cfg[table]``: value -> rule index for each table.  The caller
    (roce.families.peel) checks the counts against ``PEEL_LIMITS``."""
    global PR_N, PT_N, GR_N, RULES_N
    cdef int i, j, k
    rules = cfg["rules"]
    RULES_N = len(rules)
    for i, (size, checks, extras, inner, next_at, direct, table) in enumerate(rules):
        R_SIZE[i], R_INNER[i], R_NEXT_AT[i] = size, inner, next_at
        R_TABLE[i] = PEEL_TABLES.get(table, 0)
        R_NCHK[i], R_NEXT_N[i], R_NDIR[i] = len(checks), len(extras), len(direct)
        for j, row in enumerate(checks):
            for k in range(3):
                R_CHK[i][j][k] = row[k]
        for j, row in enumerate(extras):
            for k in range(3):
                R_EXTRA[i][j][k] = row[k]
        for j, row in enumerate(direct):
            for k in range(4):
                R_DIR[i][j][k] = row[k]
    PR_N, PT_N, GR_N = len(cfg["ip.proto"]), len(cfg["udp.port"]), len(cfg["gre.proto"])
    for i, (v, r) in enumerate(sorted(cfg["ip.proto"].items())):
        PR_VAL[i], PR_RULE[i] = v, r
    for i, (v, r) in enumerate(sorted(cfg["udp.port"].items())):
        PT_VAL[i], PT_RULE[i] = v, r
    for i, (v, r) in enumerate(sorted(cfg["gre.proto"].items())):
        GR_VAL[i], GR_RULE[i] = v, r


cdef inline int rule_of(int *vals, int *rules, int n, int v) noexcept nogil:
    cdef int i
    for i in range(n):
        if vals[i] == v:
            return rules[i]
    return -1


cdef int peel_one(const uint8_t *p, int n, int rule, int off, int *lt) noexcept nogil:
    """Offset of the inner frame (its link type in lt), or -1 to leave the frame alone."""
    cdef int i, pos, proto, table, steps = 0
    while steps < 8 and 0 <= rule < RULES_N:
        steps += 1
        if n - off < R_SIZE[rule]:
            return -1
        for i in range(R_NCHK[rule]):
            if p[off + R_CHK[rule][i][0]] & R_CHK[rule][i][1] != R_CHK[rule][i][2]:
                return -1
        pos = off + R_SIZE[rule]
        for i in range(R_NEXT_N[rule]):
            if p[off + R_EXTRA[rule][i][0]] & R_EXTRA[rule][i][1]:
                pos += R_EXTRA[rule][i][2]
        if R_NEXT_AT[rule] < 0:
            lt[0] = R_INNER[rule]
            return pos
        proto = (p[off + R_NEXT_AT[rule]] << 8) | p[off + R_NEXT_AT[rule] + 1]
        for i in range(R_NDIR[rule]):
            if proto == R_DIR[rule][i][0] and not p[off + R_DIR[rule][i][1]] & R_DIR[rule][i][2]:
                lt[0] = R_DIR[rule][i][3]
                return pos
        table = R_TABLE[rule]
        if table == 1:
            rule = rule_of(PR_VAL, PR_RULE, PR_N, proto)
        elif table == 2:
            rule = rule_of(PT_VAL, PT_RULE, PT_N, proto)
        elif table == 3:
            rule = rule_of(GR_VAL, GR_RULE, GR_N, proto)
        else:
            return -1
        off = pos
    return -1


def peel(list frames, int linktype, int udp_port):
    """Twin of roce.families.peel.peel_reference: the frames with tunnels replaced by the
    frame inside (same link type only); other frames are the same objects."""
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef WalkResult w
    cdef const uint8_t *p
    cdef int n, rule, off, lt
    cdef object f
    cdef list out = list(frames)
    for i in range(count):
        f = <object>PyList_GET_ITEM(frames, i)
        if not PyBytes_Check(f):
            raise TypeError("peel: frame %d is not bytes" % i)
        p = <const uint8_t *>PyBytes_AS_STRING(f)
        n = PyBytes_GET_SIZE(f)
        do_walk(p, n, linktype, udp_port, &w)
        if w.status == S_NR_PROTO:
            rule = rule_of(PR_VAL, PR_RULE, PR_N, w.err_a)
            off = w.l3_off + w.l3_len
        elif w.status == S_NR_PORT:
            rule = rule_of(PT_VAL, PT_RULE, PT_N, w.err_a)
            off = w.udp_off + SZ_UDP
        else:
            continue
        if rule < 0:
            continue
        lt = -1
        off = peel_one(p, n, rule, off, &lt)
        if off >= 0 and lt == linktype:
            out[i] = PyBytes_FromStringAndSize(<const char *>p + off, n - off)
    return out


# -- ERF records (roce.families.erf): the payload of every record of a batch -----------------

cdef int ERF_HDR = 16, ERF_EXTSZ = 8, ERF_EXT_BIT = 0x80, ERF_TYPE_AT = 8, ERF_RLEN_AT = 10
cdef int ERF_T_ETH = 2, ERF_PAD_ETH = 2
cdef int ERF_INNER[128]  # by record type: the link type of what it holds, -1 none


def erf_configure(dict cfg):
    """The ERF header's sizes and offsets and the record types' inner link types
    (roce.families.erf)."""
    global ERF_HDR, ERF_EXTSZ, ERF_EXT_BIT, ERF_TYPE_AT, ERF_RLEN_AT, ERF_T_ETH, ERF_PAD_ETH
    cdef int t
    ERF_HDR, ERF_EXTSZ, ERF_EXT_BIT = cfg["header"], cfg["ext"], cfg["ext_present"]
    ERF_TYPE_AT, ERF_RLEN_AT = cfg["type_at"], cfg["rlen_at"]
    ERF_T_ETH, ERF_PAD_ETH = cfg["eth"], cfg["eth_pad"]
    for t in range(128):
        ERF_INNER[t] = -1
    for t, lt in cfg["inner"].items():
        ERF_INNER[t] = lt


def erf_skip(list frames):
    """Twin of roce.families.erf.skip_batch_reference: (payloads, link type), or None."""
    cdef Py_ssize_t i, count = PyList_GET_SIZE(frames)
    cdef const uint8_t *p
    cdef int n, pos, more, tbyte, inner, lt = -1
    cdef object f
    cdef list out = []
    for i in range(count):
        f = <object>PyList_GET_ITEM(frames, i)
        if not PyBytes_Check(f):
            raise TypeError("erf_skip: frame %d is not bytes" % i)
        p = <const uint8_t *>PyBytes_AS_STRING(f)
        n = PyBytes_GET_SIZE(f)
        if n < ERF_HDR or ((p[ERF_RLEN_AT] << 8) | p[ERF_RLEN_AT + 1]) < ERF_HDR:
            return None
        tbyte = p[ERF_TYPE_AT]
        pos = ERF_HDR
        more = tbyte & ERF_EXT_BIT
        while more:
            if pos + ERF_EXTSZ > n:
                return None
            more = p[pos] & 0x80
            pos += ERF_EXTSZ
        if (tbyte & 0x7F) == ERF_T_ETH:
            pos += ERF_PAD_ETH
        inner = ERF_INNER[tbyte & 0x7F]
        if inner < 0 or (lt >= 0 and inner != lt):
            return None
        lt = inner
        out.append(PyBytes_FromStringAndSize(<const char *>p + pos, n - pos if n > pos else 0))
    return out, (lt if lt >= 0 else None)
