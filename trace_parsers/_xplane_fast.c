/* Streaming decoder of XSpace protobufs (xla/tsl/profiler/protobuf/xplane.proto) into flat
 * column buffers.
 *
 * Why C: a profile holds millions of XEvents with a few XStats each. Walking protobuf message
 * objects from Python costs ~1 us per event; this decoder reads the wire format once, writes
 * fixed-width columns and interns repeated strings, so trace_parsers/xplane.py only wraps the
 * buffers with numpy. Every read is bounds-checked: malformed input raises ValueError naming
 * the byte offset and the reason, never crashes.
 *
 * Field numbers (the wire contract, from the public xplane.proto):
 *   XSpace   planes=1 errors=2 warnings=3 hostnames=4
 *   XPlane   id=1 name=2 lines=3 event_metadata=4 (map) stat_metadata=5 (map) stats=6
 *   XLine    id=1 name=2 timestamp_ns=3 events=4 duration_ps=9 display_id=10 display_name=11
 *   XEvent   metadata_id=1 offset_ps=2 duration_ps=3 stats=4 num_occurrences=5
 *   XStat    metadata_id=1 double=2 uint64=3 int64=4 str=5 bytes=6 ref=7
 *   XEventMetadata id=1 name=2 metadata=3 display_name=4 stats=5 child_id=6
 *   XStatMetadata  id=1 name=2 description=3
 */
#include "_cols.h"

/* Stats of one owner kind: events, planes or event metadata. */
typedef struct {
    Col owner;   /* int32: event row / plane index / metadata row */
    Col meta;    /* int64: XStat.metadata_id */
    Col kind;    /* int8: 0 none 1 double 2 uint64 3 int64 4 str 5 bytes 6 ref */
    Col ival;    /* int64 by kind: the value (uint64 and ref bitwise), a double's bits, bytes' size */
    Col sid;     /* int32: interned string index of a str stat, -1 for every other kind */
} Stats;

typedef struct {
    const uint8_t *base;
    Py_ssize_t size;
    /* events */
    Col ev_plane, ev_line, ev_meta, ev_off, ev_dur;
    /* aggregated events (num_occurrences) */
    Col ag_plane, ag_line, ag_meta, ag_occ, ag_dur;
    Stats est, pst, mst;
    PyObject *lines, *planes, *evmeta, *statmeta, *hostnames, *errors, *warnings;
    Interner str; /* string stat values */
    int32_t plane_idx, line_idx;
    int64_t max_rows; /* events + aggregates + stats of all kinds; < 0: no cap */
} Ctx;

/* ---------------------------------------------------------------- wire reading */

typedef struct {
    const uint8_t *p, *end;
} Buf;

static int fail(Ctx *x, const uint8_t *at, const char *what) {
    PyErr_Format(PyExc_ValueError, "%s at byte %zd", what, (Py_ssize_t)(at - x->base));
    return -1;
}

/* The rows decoded so far, against the caller's budget: checked before each row is stored,
 * so a crafted file (32 M empty events in 62 KB of gzip) stops at the cap, not after it. */
static int over_budget(Ctx *x, const uint8_t *at) {
    if (x->max_rows < 0) return 0;
    size_t rows = x->ev_meta.len + x->ag_meta.len + x->est.owner.len + x->pst.owner.len +
                  x->mst.owner.len;
    if ((int64_t)rows < x->max_rows) return 0;
    PyErr_Format(PyExc_ValueError, "row budget: more than %lld events and stats (at byte %zd)",
                 (long long)x->max_rows, (Py_ssize_t)(at - x->base));
    return -1;
}

static inline int rd_varint(Ctx *x, Buf *b, uint64_t *out) {
    if (b->p < b->end && !(*b->p & 0x80)) { /* one byte: most tags, kinds and small ids */
        *out = *b->p++;
        return 0;
    }
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (b->p >= b->end) return fail(x, b->p, "truncated varint");
        uint8_t byte = *b->p++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) { *out = v; return 0; }
    }
    return fail(x, b->p, "varint longer than 10 bytes");
}

static inline int rd_len(Ctx *x, Buf *b, Buf *sub) {
    uint64_t n;
    if (rd_varint(x, b, &n) < 0) return -1;
    if (n > (uint64_t)(b->end - b->p)) return fail(x, b->p, "truncated: length-delimited field runs past the end of its message");
    sub->p = b->p;
    sub->end = b->p + n;
    b->p += n;
    return 0;
}

/* Skips a field whose tag was read; groups (wire types 3/4) are not valid in proto3 XPlane. */
static int skip(Ctx *x, Buf *b, uint32_t wt) {
    uint64_t v;
    Buf s;
    switch (wt) {
    case 0: return rd_varint(x, b, &v);
    case 1: if (b->end - b->p < 8) return fail(x, b->p, "truncated fixed64"); b->p += 8; return 0;
    case 2: return rd_len(x, b, &s);
    case 5: if (b->end - b->p < 4) return fail(x, b->p, "truncated fixed32"); b->p += 4; return 0;
    default: return fail(x, b->p, "invalid wire type (not a protobuf XSpace)");
    }
}

static inline int rd_tag(Ctx *x, Buf *b, uint32_t *field, uint32_t *wt) {
    uint64_t t;
    if (rd_varint(x, b, &t) < 0) return -1;
    *field = (uint32_t)(t >> 3);
    *wt = (uint32_t)(t & 7);
    if (*field == 0) return fail(x, b->p, "field number 0 (not a protobuf XSpace)");
    return 0;
}

#define EXPECT(wt_want)                                                         \
    if (wt != (wt_want)) return fail(x, b.p, "unexpected wire type for a known field");

static PyObject *mkstr(Ctx *x, Buf s, int strict) {
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s.p, s.end - s.p, strict ? NULL : "replace");
    if (!o && strict) {
        PyErr_Clear();
        fail(x, s.p, "invalid UTF-8 in a name (not an XSpace)");
    }
    return o;
}

/* ---------------------------------------------------------------- messages */

static int parse_stat(Ctx *x, Buf b, Stats *st, int32_t owner) {
    int64_t meta = 0, iv = 0;
    int8_t kind = 0;
    int32_t sid = -1;
    uint32_t f, wt;
    uint64_t v;
    Buf s;
    while (b.p < b.end) {
        if (rd_tag(x, &b, &f, &wt) < 0) return -1;
        switch (f) {
        case 1: EXPECT(0); if (rd_varint(x, &b, &v) < 0) return -1; meta = (int64_t)v; break;
        case 2: EXPECT(1);
            if (b.end - b.p < 8) return fail(x, b.p, "truncated double");
            memcpy(&iv, b.p, 8); b.p += 8; kind = 1; sid = -1; break; /* the bits */
        case 3: case 4: case 7: EXPECT(0);
            if (rd_varint(x, &b, &v) < 0) return -1;
            iv = (int64_t)v; kind = f == 3 ? 2 : f == 4 ? 3 : 6; sid = -1; break;
        case 5: EXPECT(2);
            if (rd_len(x, &b, &s) < 0) return -1;
            if ((sid = intern(&x->str, (const char *)s.p, s.end - s.p)) < 0) return -1;
            kind = 4; break;
        case 6: EXPECT(2); /* opaque payloads (e.g. serialized HLO): keep the size only */
            if (rd_len(x, &b, &s) < 0) return -1;
            iv = (int64_t)(s.end - s.p); kind = 5; sid = -1; break;
        default: if (skip(x, &b, wt) < 0) return -1;
        }
    }
    if (over_budget(x, b.p)) return -1;
    if (push_i32(&st->owner, owner) < 0 || push_i64(&st->meta, meta) < 0 ||
        push_i8(&st->kind, kind) < 0 || push_i64(&st->ival, iv) < 0 ||
        push_i32(&st->sid, sid) < 0)
        return -1;
    return 0;
}

static int parse_event(Ctx *x, Buf b) {
    int64_t meta = 0, off = 0, dur = 0, occ = 0;
    int has_occ = 0;
    uint32_t f, wt;
    uint64_t v;
    Buf s;
    if (x->ev_meta.len >= INT32_MAX) return fail(x, b.p, "more than 2^31 events");
    int32_t row = (int32_t)x->ev_meta.len; /* provisional: stats are rolled back for aggregates */
    int64_t stat0 = (int64_t)x->est.owner.len;
    while (b.p < b.end) {
        if (rd_tag(x, &b, &f, &wt) < 0) return -1;
        switch (f) {
        case 1: EXPECT(0); if (rd_varint(x, &b, &v) < 0) return -1; meta = (int64_t)v; break;
        case 2: EXPECT(0); if (rd_varint(x, &b, &v) < 0) return -1; off = (int64_t)v; has_occ = 0; break;
        case 3: EXPECT(0); if (rd_varint(x, &b, &v) < 0) return -1; dur = (int64_t)v; break;
        case 5: EXPECT(0); if (rd_varint(x, &b, &v) < 0) return -1; occ = (int64_t)v; has_occ = 1; break;
        case 4: EXPECT(2);
            if (rd_len(x, &b, &s) < 0 || parse_stat(x, s, &x->est, row) < 0) return -1;
            break;
        default: if (skip(x, &b, wt) < 0) return -1;
        }
    }
    if (over_budget(x, b.p)) return -1;
    if (has_occ) {
        /* Aggregates have no time: keep them off the timeline, and drop their stats from the
         * event-stat table (they are not timeline rows). */
        Stats *st = &x->est;
        st->owner.len = st->meta.len = st->kind.len = st->ival.len = st->sid.len = (size_t)stat0;
        return col_push(&x->ag_plane, &x->plane_idx) | col_push(&x->ag_line, &x->line_idx) |
               col_push(&x->ag_meta, &meta) | col_push(&x->ag_occ, &occ) | col_push(&x->ag_dur, &dur);
    }
    if (push_i32(&x->ev_plane, x->plane_idx) < 0 || push_i32(&x->ev_line, x->line_idx) < 0 ||
        push_i64(&x->ev_meta, meta) < 0 || push_i64(&x->ev_off, off) < 0 ||
        push_i64(&x->ev_dur, dur) < 0)
        return -1;
    if ((x->ev_meta.len & 0x7FFFF) == 0) { /* every 512 k events (a few ms): let the process's
                                               other threads run (a server's /healthz) */
        Py_BEGIN_ALLOW_THREADS
        Py_END_ALLOW_THREADS
    }
    return 0;
}

static int parse_line(Ctx *x, Buf b) {
    int64_t id = 0, display_id = 0, ts = 0, dur = 0;
    PyObject *name = NULL, *dname = NULL;
    uint32_t f, wt;
    uint64_t v;
    Buf s;
    int64_t ev0 = (int64_t)x->ev_meta.len;
    while (b.p < b.end) {
        if (rd_tag(x, &b, &f, &wt) < 0) goto err;
        switch (f) {
        case 1: EXPECT(0); if (rd_varint(x, &b, &v) < 0) goto err; id = (int64_t)v; break;
        case 10: EXPECT(0); if (rd_varint(x, &b, &v) < 0) goto err; display_id = (int64_t)v; break;
        case 3: EXPECT(0); if (rd_varint(x, &b, &v) < 0) goto err; ts = (int64_t)v; break;
        case 9: EXPECT(0); if (rd_varint(x, &b, &v) < 0) goto err; dur = (int64_t)v; break;
        case 2: case 11: EXPECT(2);
            if (rd_len(x, &b, &s) < 0) goto err;
            PyObject *o = mkstr(x, s, 1);
            if (!o) goto err;
            if (f == 2) { Py_XSETREF(name, o); } else { Py_XSETREF(dname, o); }
            break;
        case 4: EXPECT(2);
            if (rd_len(x, &b, &s) < 0 || parse_event(x, s) < 0) goto err;
            break;
        default: if (skip(x, &b, wt) < 0) goto err;
        }
    }
    {
        PyObject *t = Py_BuildValue("(iLLOOLLLL)", x->plane_idx, id, display_id,
                                    name ? name : Py_None, dname ? dname : Py_None, ts, dur, ev0,
                                    (long long)((int64_t)x->ev_meta.len - ev0));
        Py_XDECREF(name);
        Py_XDECREF(dname);
        if (!t) return -1;
        int rc = PyList_Append(x->lines, t);
        Py_DECREF(t);
        x->line_idx++;
        return rc;
    }
err:
    Py_XDECREF(name);
    Py_XDECREF(dname);
    return -1;
}

/* One map entry of event_metadata (kind 0) or stat_metadata (kind 1). */
static int parse_meta_entry(Ctx *x, Buf b, int kind) {
    int64_t key = 0, id = 0;
    PyObject *name = NULL, *dname = NULL;
    Py_ssize_t blob = 0;
    uint32_t f, wt;
    uint64_t v;
    Buf s, val = {NULL, NULL};
    while (b.p < b.end) {
        if (rd_tag(x, &b, &f, &wt) < 0) return -1;
        if (f == 1) { EXPECT(0); if (rd_varint(x, &b, &v) < 0) return -1; key = (int64_t)v; }
        else if (f == 2) { EXPECT(2); if (rd_len(x, &b, &val) < 0) return -1; }
        else if (skip(x, &b, wt) < 0) return -1;
    }
    int32_t row = kind == 0 ? (int32_t)PyList_GET_SIZE(x->evmeta) : 0;
    int64_t stat0 = (int64_t)x->mst.owner.len;
    b = val;
    while (b.p && b.p < b.end) {
        if (rd_tag(x, &b, &f, &wt) < 0) goto err;
        if (f == 1 && wt == 0) { if (rd_varint(x, &b, &v) < 0) goto err; id = (int64_t)v; }
        else if ((f == 2 || (kind == 0 && f == 4) || (kind == 1 && f == 3)) && wt == 2) {
            if (rd_len(x, &b, &s) < 0) goto err;
            PyObject *o = mkstr(x, s, f == 2);
            if (!o) goto err;
            if (f == 2) { Py_XSETREF(name, o); } else { Py_XSETREF(dname, o); }
        } else if (kind == 0 && f == 3 && wt == 2) {
            if (rd_len(x, &b, &s) < 0) goto err;
            blob = s.end - s.p;
        } else if (kind == 0 && f == 5 && wt == 2) {
            if (rd_len(x, &b, &s) < 0 || parse_stat(x, s, &x->mst, row) < 0) goto err;
        } else if (skip(x, &b, wt) < 0) goto err;
    }
    (void)id; /* the map key is authoritative, as in XProf's XPlaneVisitor */
    PyObject *t;
    if (kind == 0)
        t = Py_BuildValue("(iLOOnLL)", x->plane_idx, key, name ? name : Py_None,
                          dname ? dname : Py_None, blob, stat0,
                          (long long)((int64_t)x->mst.owner.len - stat0));
    else
        t = Py_BuildValue("(iLOO)", x->plane_idx, key, name ? name : Py_None, dname ? dname : Py_None);
    Py_XDECREF(name);
    Py_XDECREF(dname);
    if (!t) return -1;
    int rc = PyList_Append(kind == 0 ? x->evmeta : x->statmeta, t);
    Py_DECREF(t);
    return rc;
err:
    Py_XDECREF(name);
    Py_XDECREF(dname);
    return -1;
}

static int parse_plane(Ctx *x, Buf b) {
    int64_t id = 0;
    PyObject *name = NULL;
    uint32_t f, wt;
    uint64_t v;
    Buf s;
    while (b.p < b.end) {
        if (rd_tag(x, &b, &f, &wt) < 0) goto err;
        switch (f) {
        case 1: EXPECT(0); if (rd_varint(x, &b, &v) < 0) goto err; id = (int64_t)v; break;
        case 2: EXPECT(2);
            if (rd_len(x, &b, &s) < 0) goto err;
            { PyObject *o = mkstr(x, s, 1); if (!o) goto err; Py_XSETREF(name, o); }
            break;
        case 3: EXPECT(2); if (rd_len(x, &b, &s) < 0 || parse_line(x, s) < 0) goto err; break;
        case 4: EXPECT(2); if (rd_len(x, &b, &s) < 0 || parse_meta_entry(x, s, 0) < 0) goto err; break;
        case 5: EXPECT(2); if (rd_len(x, &b, &s) < 0 || parse_meta_entry(x, s, 1) < 0) goto err; break;
        case 6: EXPECT(2);
            if (rd_len(x, &b, &s) < 0 || parse_stat(x, s, &x->pst, x->plane_idx) < 0) goto err;
            break;
        default: if (skip(x, &b, wt) < 0) goto err;
        }
    }
    {
        PyObject *t = Py_BuildValue("(LO)", id, name ? name : Py_None);
        Py_XDECREF(name);
        if (!t) return -1;
        int rc = PyList_Append(x->planes, t);
        Py_DECREF(t);
        return rc;
    }
err:
    Py_XDECREF(name);
    return -1;
}

static int parse_space(Ctx *x, Buf b) {
    uint32_t f, wt;
    Buf s;
    while (b.p < b.end) {
        if (rd_tag(x, &b, &f, &wt) < 0) return -1;
        if (f == 1) {
            EXPECT(2);
            if (rd_len(x, &b, &s) < 0 || parse_plane(x, s) < 0) return -1;
            x->plane_idx++;
        } else if (f >= 2 && f <= 4) {
            EXPECT(2);
            if (rd_len(x, &b, &s) < 0) return -1;
            PyObject *o = mkstr(x, s, 0);
            if (!o) return -1;
            int rc = PyList_Append(f == 2 ? x->errors : f == 3 ? x->warnings : x->hostnames, o);
            Py_DECREF(o);
            if (rc < 0) return -1;
        } else if (skip(x, &b, wt) < 0) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- module functions */

static void stats_init(Stats *s) {
    memset(s, 0, sizeof(*s));
    W(s->owner, int32_t); W(s->meta, int64_t); W(s->kind, int8_t);
    W(s->ival, int64_t); W(s->sid, int32_t);
}

static void stats_free(Stats *s) {
    Col *cs[] = {&s->owner, &s->meta, &s->kind, &s->ival, &s->sid};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) col_free(cs[i]);
}

static PyObject *stats_take(Stats *s) {
    return Py_BuildValue("{s:N,s:N,s:N,s:N,s:N}", "owner", col_take(&s->owner),
                         "metadata_id", col_take(&s->meta), "kind", col_take(&s->kind),
                         "ival", col_take(&s->ival), "sid", col_take(&s->sid));
}

static PyObject *decode_xspace(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long max_rows = -1;
    if (!PyArg_ParseTuple(args, "y*|L", &view, &max_rows)) return NULL;
    Ctx x;
    memset(&x, 0, sizeof(x));
    x.max_rows = max_rows;
    x.base = (const uint8_t *)view.buf;
    x.size = view.len;
    W(x.ev_plane, int32_t); W(x.ev_line, int32_t); W(x.ev_meta, int64_t); W(x.ev_off, int64_t);
    W(x.ev_dur, int64_t);
    W(x.ag_plane, int32_t); W(x.ag_line, int32_t); W(x.ag_meta, int64_t); W(x.ag_occ, int64_t);
    W(x.ag_dur, int64_t);
    stats_init(&x.est); stats_init(&x.pst); stats_init(&x.mst);
    x.lines = PyList_New(0); x.planes = PyList_New(0); x.evmeta = PyList_New(0);
    x.statmeta = PyList_New(0); x.hostnames = PyList_New(0); x.errors = PyList_New(0);
    x.warnings = PyList_New(0);
    PyObject *out = NULL;
    Col *cols[] = {&x.ev_plane, &x.ev_line, &x.ev_meta, &x.ev_off, &x.ev_dur,
                   &x.ag_plane, &x.ag_line, &x.ag_meta, &x.ag_occ, &x.ag_dur};
    if (!x.lines || !x.planes || !x.evmeta || !x.statmeta || !x.hostnames || !x.errors ||
        !x.warnings || interner_init(&x.str) < 0)
        goto done;
    /* Room for the events and event stats a file of this size usually holds (captures run at
     * 20-30 bytes per event with its stats): growing a column copies it whenever realloc cannot
     * extend it in place, and reserved pages cost no memory until written. */
    size_t guess = (size_t)x.size / 16 + 1;
    Col *big[] = {&x.ev_plane, &x.ev_line, &x.ev_meta, &x.ev_off, &x.ev_dur, &x.est.owner,
                  &x.est.meta, &x.est.kind, &x.est.ival, &x.est.sid};
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
        if (col_reserve(big[i], guess) < 0) goto done;
    Buf b = {x.base, x.base + x.size};
    if (parse_space(&x, b) < 0) goto done;
    out = Py_BuildValue(
        "{" "s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N," "s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}",
        "ev_plane", col_take(&x.ev_plane), "ev_line", col_take(&x.ev_line),
        "ev_metadata_id", col_take(&x.ev_meta), "ev_offset_ps", col_take(&x.ev_off),
        "ev_duration_ps", col_take(&x.ev_dur), "ag_plane", col_take(&x.ag_plane),
        "ag_line", col_take(&x.ag_line), "ag_metadata_id", col_take(&x.ag_meta),
        "ag_num_occurrences", col_take(&x.ag_occ), "ag_duration_ps", col_take(&x.ag_dur),
        "event_stats", stats_take(&x.est), "plane_stats", stats_take(&x.pst),
        "metadata_stats", stats_take(&x.mst), "lines", x.lines, "planes", x.planes,
        "event_metadata", x.evmeta, "stat_metadata", x.statmeta, "hostnames", x.hostnames,
        "errors", x.errors, "warnings", x.warnings, "strings", x.str.list);
done:
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) col_free(cols[i]);
    stats_free(&x.est); stats_free(&x.pst); stats_free(&x.mst);
    Py_XDECREF(x.lines); Py_XDECREF(x.planes); Py_XDECREF(x.evmeta); Py_XDECREF(x.statmeta);
    Py_XDECREF(x.hostnames); Py_XDECREF(x.errors); Py_XDECREF(x.warnings);
    interner_free(&x.str);
    PyBuffer_Release(&view);
    return out;
}

/* Stores code v in a column of 1, 2 or 4-byte codes (numpy's narrowest categorical codes). */
static inline void put_code(char *col, Py_ssize_t width, size_t i, int32_t v) {
    if (width == 1) ((int8_t *)col)[i] = (int8_t)v;
    else if (width == 2) ((int16_t *)col)[i] = (int16_t)v;
    else ((int32_t *)col)[i] = v;
}

/* One promoted key's per-event column that long_stats scatters event stats into: int64 values
 * with a missing mask (numbers), or int32 string codes (mask NULL). */
typedef struct {
    Py_buffer values, mask;
    int has_values, has_mask;
    Py_ssize_t len;
} Target;

static void targets_release(Target *t, Py_ssize_t k) {
    for (Py_ssize_t i = 0; i < k; i++) {
        if (t[i].has_values) PyBuffer_Release(&t[i].values);
        if (t[i].has_mask) PyBuffer_Release(&t[i].mask);
    }
}

/* Reads the targets tuple: per promoted key index, None or (values,) / (values, mask). */
static int targets_get(PyObject *tuple, Target *t, Py_ssize_t k) {
    memset(t, 0, sizeof(Target) * (size_t)k);
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (item == Py_None) continue;
        Py_ssize_t parts = PyTuple_Check(item) ? PyTuple_GET_SIZE(item) : 0;
        if (parts != 1 && parts != 2) {
            PyErr_SetString(PyExc_ValueError, "long_stats: a target is (values,) or (values, mask)");
            return -1;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &t[i].values, PyBUF_WRITABLE) < 0)
            return -1;
        t[i].has_values = 1;
        if (parts == 2) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 1), &t[i].mask, PyBUF_WRITABLE) < 0)
                return -1;
            t[i].has_mask = 1;
            t[i].len = t[i].mask.len;
            if (t[i].values.len != t[i].len * 8) goto bad;
        } else {
            t[i].len = t[i].values.len / 4;
            if (t[i].values.len != t[i].len * 4) goto bad;
        }
    }
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "long_stats: a target's values and mask differ in length");
    return -1;
}

/* A double stat as an int64 column value: truncated toward zero, saturated at the int64
 * range; NaN is missing (returns 0). */
static inline int double_to_i64(double d, int64_t *out) {
    if (d != d) return 0;
    if (d >= 9223372036854775807.0) *out = INT64_MAX;
    else if (d <= -9223372036854775808.0) *out = INT64_MIN;
    else *out = (int64_t)d;
    return 1;
}

/* long_stats(promoted, kind, key_row, ival, sid, owner, key_code, str_code, keep_all,
 *            key_width, str_width, imask, dval, dmask, targets, written, keep_key) -> rows kept
 *
 * The columns of a long stats frame in one pass over a stat table, compacted in place: the
 * rows whose promoted key index is < 0 (every row with keep_all) move to the front of owner
 * (int32), kind (int8) and ival (int64, the integer value; 0 unless an integer kind); key_row
 * becomes the key codes (key_code[key_row], the last slot for a row without stat metadata) and
 * sid the string codes (str_code[sid], -1 without a string), both rewritten as 1, 2 or 4-byte
 * codes (key_width, str_width: numpy's narrowest categorical codes). Writing row k <= i after
 * reading row i never overwrites an unread row. Into the caller's arrays of exactly the kept
 * length: imask (not an integer kind), dval and dmask (not a double); dval is written only at
 * double rows, so a zeroed dval costs no memory when the table has none.
 *
 * Without keep_all, a row of promoted key p goes to targets[p] at its owner's position
 * instead: a string key's int32 codes get the row's sid; a number key's int64 values get an
 * integer as is, a double truncated (NaN: missing), any other kind missing, and its mask says
 * so. written[p] (int64) counts the rows each key received. Inputs: promoted and kind int8;
 * key_row, sid, owner and the code tables int32; ival int64.
 *
 * keep_key (uint8 per key code; empty: every key) keeps only the rows of the keys it marks, for
 * a caller that reads a few stats (the op tables): the outputs are then at least the kept
 * length, and only the first (returned) rows are written. */
static PyObject *long_stats(PyObject *self, PyObject *args) {
    Py_buffer pr, kd, kr, iv, sd, ow, kc, sc, oim, od, odm, wr, kk;
    int keep_all, kw, sw;
    PyObject *tuple;
    if (!PyArg_ParseTuple(args, "y*w*w*w*w*w*y*y*piiw*w*w*O!w*y*", &pr, &kd, &kr, &iv, &sd, &ow,
                          &kc, &sc, &keep_all, &kw, &sw, &oim, &od, &odm, &PyTuple_Type, &tuple,
                          &wr, &kk))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = kd.len, n_kc = kc.len / 4, n_sc = sc.len / 4, m = oim.len, n_kk = kk.len;
    const uint8_t *keep_key = kk.buf;
    Py_ssize_t n_targets = PyTuple_GET_SIZE(tuple);
    Target *targets = PyMem_Calloc((size_t)(n_targets ? n_targets : 1), sizeof(Target));
    if (!targets) { PyErr_NoMemory(); goto done; }
    if (pr.len != n || kr.len != n * 4 || iv.len != n * 8 || sd.len != n * 4 || ow.len != n * 4 ||
        n_kc < 1 || m > n || od.len != m * 8 || odm.len != m || (kw != 1 && kw != 2 && kw != 4) ||
        (sw != 1 && sw != 2 && sw != 4) || wr.len != n_targets * 8) {
        PyErr_SetString(PyExc_ValueError, "long_stats: column lengths differ");
        goto done;
    }
    if (targets_get(tuple, targets, n_targets) < 0) goto done;
    const int8_t *promoted = pr.buf;
    const int32_t *key_code = kc.buf, *str_code = sc.buf;
    int8_t *kind = kd.buf;
    int32_t *key_row = kr.buf, *sid = sd.buf, *owner = ow.buf;
    int64_t *ival = iv.buf, *written = wr.buf;
    uint8_t *imask = oim.buf, *dmask = odm.buf;
    double *dval = od.buf;
    memset(written, 0, (size_t)wr.len);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int8_t kn = kind[i];
        int32_t o = owner[i];
        int64_t v = ival[i];
        int8_t p = promoted[i];
        if (!keep_all && p >= 0) {
            Target *t = p < n_targets ? &targets[p] : NULL;
            if (!t || !t->has_values) continue; /* a key the caller does not build */
            if (o < 0 || o >= t->len) {
                PyErr_SetString(PyExc_ValueError, "long_stats: a promoted stat's owner is out of range");
                goto done;
            }
            if (!t->has_mask) {
                ((int32_t *)t->values.buf)[o] = sid[i];
            } else {
                double d;
                int64_t out = v;
                int ok = kn == 2 || kn == 3;
                if (kn == 1) { memcpy(&d, &v, 8); ok = double_to_i64(d, &out); }
                ((int64_t *)t->values.buf)[o] = ok ? out : 0;
                ((uint8_t *)t->mask.buf)[o] = !ok;
            }
            written[p]++;
            continue;
        }
        int32_t r = key_row[i], s = sid[i];
        int32_t code = key_code[r >= 0 && r < n_kc - 1 ? r : n_kc - 1];
        if (n_kk && (code < 0 || code >= n_kk || !keep_key[code])) continue; /* not asked for */
        if (k == m) { k++; break; } /* more kept rows than the caller counted: reported below */
        int is_int = kn == 2 || kn == 3 || kn == 5, is_double = kn == 1;
        if (is_double) memcpy(&dval[k], &v, 8);
        owner[k] = o;
        kind[k] = kn;
        ival[k] = is_int ? v : 0;
        imask[k] = !is_int;
        dmask[k] = !is_double;
        put_code((char *)key_row, kw, k, code);
        put_code((char *)sid, sw, k, s >= 0 && s < n_sc ? str_code[s] : -1);
        k++;
    }
    if (n_kk ? k > m : k != m) {
        PyErr_SetString(PyExc_ValueError, "long_stats: kept rows differ from the outputs' length");
        goto done;
    }
    res = PyLong_FromSsize_t(k);
done:
    if (targets) targets_release(targets, n_targets);
    PyMem_Free(targets);
    PyBuffer_Release(&pr); PyBuffer_Release(&kd); PyBuffer_Release(&kr); PyBuffer_Release(&iv);
    PyBuffer_Release(&sd); PyBuffer_Release(&ow); PyBuffer_Release(&kc); PyBuffer_Release(&sc);
    PyBuffer_Release(&oim); PyBuffer_Release(&od); PyBuffer_Release(&odm); PyBuffer_Release(&wr);
    PyBuffer_Release(&kk);
    return res;
}

static PyMethodDef methods[] = {
    {"decode_xspace", decode_xspace, METH_VARARGS,
     "decode_xspace(buffer, max_rows=-1) -> dict of column buffers and small tables; ValueError "
     "if malformed or over max_rows events and stats."},
    {"long_stats", long_stats, METH_VARARGS,
     "long_stats(promoted, kind, key_row, ival, sid, owner, key_code, str_code, keep_all, key_width, "
     "str_width, imask, dval, dmask, targets, written, keep_key) -> kept rows (compacted in place)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_xplane_fast",
                                    "Fast XSpace wire decoder (see trace_parsers/xplane.py).", -1,
                                    methods};

/* The stat kinds of the decoder's kind column (XStat's value oneof), exported so that Python
 * declares them once (trace_parsers.xplane.StatKind) and a test holds the two together. */
PyMODINIT_FUNC PyInit__xplane_fast(void) {
    hash_key_init();
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    static const struct { const char *name; long value; } kinds[] = {
        {"KIND_NONE", 0}, {"KIND_DOUBLE", 1}, {"KIND_UINT64", 2}, {"KIND_INT64", 3},
        {"KIND_STR", 4},  {"KIND_BYTES", 5},  {"KIND_REF", 6},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (PyModule_AddIntConstant(m, kinds[i].name, kinds[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
