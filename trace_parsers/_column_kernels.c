/* Column kernels shared by every parser (XPlane, ftrace/atrace text, Chrome JSON, Perfetto):
 * the nesting pass (depth, parent, self time of events on one timeline) and a hash join of
 * (plane, id) keys against a small table; the step breakdown's sweep; the op tables'
 * per-group statistics; and a small table gathered by categorical codes. All take numpy
 * buffers and release the GIL for their main loop; the Python wrappers are
 * trace_parsers.nesting (nest, top_type_times), trace_parsers.xplane._lookup,
 * analyzers.ops._aggregate (group_stats) and analyzers._match (gather).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "_hash.h"

/* nest(group, start, end, depth_out, parent_out, self_out)
 *
 * Events must be sorted by (group, start asc, end desc). For each event: depth within its group
 * (a line), the row of its innermost enclosing event (-1 at top level), and self time = its
 * duration minus the union of its direct children's time (children clipped to the parent, so
 * partial overlaps never make self time negative). One pass with an explicit stack; this is the
 * one sequential loop of the parser (GUIDE convention 2).
 */
static PyObject *nest(PyObject *self, PyObject *args) {
    /* nest(group, start, end, depth, parent, self) -> True if the rows were in timeline order
     * (group ascending, start ascending, end descending); the results are only valid then.
     * group and parent may be int32 or int64 (told apart by their byte length). */
    Py_buffer g, s, e, d, p, sf;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*", &g, &s, &e, &d, &p, &sf)) return NULL;
    Py_ssize_t n = s.len / 8;
    PyObject *res = NULL;
    /* The open events of the current line: row and the end of its children's union so far.
     * As deep as the nesting, not as long as the line: grown on demand. */
    typedef struct { int64_t row, covered; } Open;
    Open *stack = NULL;
    Py_ssize_t cap = 64;
    int g32 = g.len == n * 4 && n > 0, p32 = p.len == n * 4 && n > 0;
    if ((!g32 && g.len != n * 8) || e.len != n * 8 || d.len != n * 4 || (!p32 && p.len != n * 8) ||
        sf.len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "nest: column lengths differ");
        goto out;
    }
    const int64_t *st = s.buf, *en = e.buf;
    const int32_t *grp32 = g.buf;
    const int64_t *grp64 = g.buf;
    int32_t *depth = d.buf, *parent32 = p.buf;
    int64_t *parent64 = p.buf, *selft = sf.buf;
    if (!(stack = PyMem_RawMalloc(sizeof(Open) * cap))) { PyErr_NoMemory(); goto out; }
    Py_ssize_t top = 0;
    int ordered = 1, oom = 0;
    int64_t prev_g = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t gi = g32 ? grp32[i] : grp64[i];
        if (i > 0) {
            if (gi != prev_g) {
                if (gi < prev_g) ordered = 0;
                top = 0;
            } else if (st[i] < st[i - 1] || (st[i] == st[i - 1] && en[i] > en[i - 1])) {
                ordered = 0;
            }
        }
        prev_g = gi;
        while (top > 0 && en[stack[top - 1].row] <= st[i]) top--;
        /* An event that starts inside the parent but outlasts it is still its child (clipped),
         * matching how trace viewers draw it. */
        int64_t par = top > 0 ? stack[top - 1].row : -1;
        depth[i] = (int32_t)top;
        if (p32) parent32[i] = (int32_t)par; else parent64[i] = par;
        selft[i] = en[i] - st[i];
        if (par >= 0) {
            int64_t *covered = &stack[top - 1].covered;
            int64_t lo = st[i] > *covered ? st[i] : *covered;
            int64_t hi = en[i] < en[par] ? en[i] : en[par];
            if (hi > lo) { selft[par] -= hi - lo; *covered = hi; }
        }
        if (top == cap) {
            Open *grown = PyMem_RawRealloc(stack, sizeof(Open) * (size_t)cap * 2);
            if (!grown) { oom = 1; break; }
            stack = grown;
            cap *= 2;
        }
        stack[top].row = i;
        stack[top].covered = st[i];
        top++;
    }
    Py_END_ALLOW_THREADS
    if (oom) PyErr_NoMemory(); else res = PyBool_FromLong(ordered);
out:
    PyMem_RawFree(stack);
    PyBuffer_Release(&g); PyBuffer_Release(&s); PyBuffer_Release(&e);
    PyBuffer_Release(&d); PyBuffer_Release(&p); PyBuffer_Release(&sf);
    return res;
}

/* lookup(plane_of, ids, table_plane, table_ids, owner, out)
 *
 * out[i] = row r of the table with (table_plane[r], table_ids[r]) == (plane, ids[i]), -1 if none,
 * where plane = plane_of[owner[i]] (owner not None: a stat's plane is its owner's) or plane_of[i].
 * plane_of, owner and out are int32; ids, table_plane and table_ids int64. One pass over the
 * queries into an open-addressing table of the (small) metadata table; of duplicate (plane, id)
 * keys the last row wins, as in a protobuf map. */
static inline uint64_t key_hash(int64_t plane, int64_t id) {
    return hash_u64((uint64_t)id ^ mix64((uint64_t)plane));
}

static PyObject *lookup(PyObject *self, PyObject *args) {
    Py_buffer pl, id, tp, ti, ow = {0}, out;
    PyObject *owner_obj;
    if (!PyArg_ParseTuple(args, "y*y*y*y*Ow*", &pl, &id, &tp, &ti, &owner_obj, &out)) return NULL;
    PyObject *res = NULL;
    int32_t *slots = NULL;
    Py_ssize_t n = id.len / 8, m = ti.len / 8, n_planes = pl.len / 4;
    int use_owner = owner_obj != Py_None;
    if (use_owner && PyObject_GetBuffer(owner_obj, &ow, PyBUF_SIMPLE) < 0) {
        use_owner = 0;
        goto done;
    }
    if (out.len != n * 4 || tp.len != m * 8 || (use_owner && ow.len != n * 4) ||
        (!use_owner && pl.len != n * 4)) {
        PyErr_SetString(PyExc_ValueError, "lookup: column lengths differ");
        goto done;
    }
    size_t cap = 16;
    while (cap < (size_t)m * 2) cap *= 2;
    if (!(slots = PyMem_Malloc(cap * sizeof(int32_t)))) { PyErr_NoMemory(); goto done; }
    memset(slots, 0xff, cap * sizeof(int32_t));
    const int64_t *tplane = tp.buf, *tid = ti.buf, *ids = id.buf;
    const int32_t *plane_of = pl.buf, *owner = ow.buf;
    int32_t *o = out.buf;
    for (Py_ssize_t r = 0; r < m; r++) {
        size_t j = key_hash(tplane[r], tid[r]) & (cap - 1);
        while (slots[j] >= 0 && !(tplane[slots[j]] == tplane[r] && tid[slots[j]] == tid[r]))
            j = (j + 1) & (cap - 1);
        slots[j] = (int32_t)r;
    }
    int bad_owner = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t plane;
        if (use_owner) {
            int32_t w = owner[i];
            if (w < 0 || w >= n_planes) { bad_owner = 1; break; }
            plane = plane_of[w];
        } else {
            plane = plane_of[i];
        }
        size_t j = key_hash(plane, ids[i]) & (cap - 1);
        int32_t r;
        while ((r = slots[j]) >= 0 && !(tplane[r] == plane && tid[r] == ids[i]))
            j = (j + 1) & (cap - 1);
        o[i] = r;
    }
    Py_END_ALLOW_THREADS
    if (bad_owner) { PyErr_SetString(PyExc_ValueError, "lookup: owner out of range"); goto done; }
    res = Py_NewRef(Py_None);
done:
    PyMem_Free(slots);
    PyBuffer_Release(&pl); PyBuffer_Release(&id); PyBuffer_Release(&tp);
    PyBuffer_Release(&ti); PyBuffer_Release(&out);
    if (use_owner) PyBuffer_Release(&ow);
    return res;
}

/* sweep(starts, ends, step_start, step_end, step_end_sorted, bits, out)
 *
 * The step breakdown's sweep (analyzers.breakdown): per step and event type, the ns during which
 * that type is the highest-priority one active. starts and ends are the events' start and end
 * times relative to a common origin, shifted left by `bits` with the event's priority in the low
 * bits, each sorted ascending (so they are in time order); step_start is sorted, step_end gives
 * each step's end, step_end_sorted the same ends sorted. An event is active on [start, end);
 * time where none is active goes to priority 0. A step owns [step_start[k], step_end[k]) up to
 * the next step's start (steps do not overlap). out is int64, steps x (1 << bits), zeroed by the
 * caller. One merge over the four sorted inputs; counts per priority are the only state.
 */
static PyObject *sweep(PyObject *self, PyObject *args) {
    Py_buffer sb, eb, ssb, seb, sesb, ob;
    int bits;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*iw*", &sb, &eb, &ssb, &seb, &sesb, &bits, &ob))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = sb.len / 8, m = ssb.len / 8, ncat = (Py_ssize_t)1 << (bits > 0 ? bits : 0);
    if (bits < 1 || bits > 8 || eb.len != n * 8 || seb.len != m * 8 || sesb.len != m * 8 ||
        ob.len != m * ncat * 8) {
        PyErr_SetString(PyExc_ValueError, "sweep: bad column lengths or bits");
        goto done;
    }
    const int64_t *S = sb.buf, *E = eb.buf, *SS = ssb.buf, *SE = seb.buf, *SES = sesb.buf;
    int64_t *out = ob.buf;
    const int64_t mask = ncat - 1;
    int64_t count[256] = {0};
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0, j = 0, a = 0, b = 0, k = -1;
    int have_prev = 0;
    int64_t prev = 0;
    for (;;) {
        int64_t t = INT64_MAX;
        int any = 0;
        if (i < n && (S[i] >> bits) <= t) { t = S[i] >> bits; any = 1; }
        if (j < n && (E[j] >> bits) <= t) { t = E[j] >> bits; any = 1; }
        if (a < m && SS[a] <= t) { t = SS[a]; any = 1; }
        if (b < m && SES[b] <= t) { t = SES[b]; any = 1; }
        if (!any) break;
        if (have_prev && t > prev) {
            while (k + 1 < m && SS[k + 1] <= prev) k++;
            if (k >= 0 && prev < SE[k]) {
                Py_ssize_t top = mask;
                while (top > 0 && count[top] <= 0) top--;
                out[k * ncat + top] += t - prev;
            }
        }
        while (i < n && (S[i] >> bits) == t) count[S[i++] & mask]++;
        while (j < n && (E[j] >> bits) == t) count[E[j++] & mask]--;
        while (a < m && SS[a] == t) a++;
        while (b < m && SES[b] == t) b++;
        prev = t;
        have_prev = 1;
    }
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&sb); PyBuffer_Release(&eb); PyBuffer_Release(&ssb);
    PyBuffer_Release(&seb); PyBuffer_Release(&sesb); PyBuffer_Release(&ob);
    return res;
}

/* group_stats(gid, dur, self, eager, flops, bytes, ints_out, floats_out)
 *
 * The op tables' aggregation (analyzers.ops._aggregate). Per group id g in 0..G-1 (gid int64,
 * each in range; dur and self int64, eager int8 0/1, flops and bytes float64), ints_out
 * (int64, 10 x G, zeroed by the caller) gets by row: count, sum of dur, sum of self, min and
 * max of dur, sum of eager, then dur at ranks lo and lo + 1 of p50 and of p95; floats_out
 * (float64, 4 x G, zeroed) gets the sums of flops and of bytes (row order) and p50's and p95's
 * fractions. A quantile q interpolates linearly, as numpy's and pandas' default: at = q *
 * (count - 1), lo = floor(at), fraction at - lo, rank lo + 1 capped at count - 1. One pass
 * buckets the durations by group (a counting sort); a selection per group then finds the
 * ranks in linear expected time, where a sort of the whole column took most of the table.
 */
static void swap64(int64_t *a, int64_t *b) { int64_t t = *a; *a = *b; *b = t; }

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Moves the k-th smallest of v[0..n) to v[k], none larger before it, none smaller after.
 * Quickselect with a median-of-three pivot; after 2 log2(n) + 4 rounds (inputs built to
 * defeat the pivot, as a hostile trace could be) the rest is sorted: never quadratic. */
static void select_kth(int64_t *v, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = n - 1;
    int rounds = 4;
    for (Py_ssize_t m = n; m > 1; m >>= 1) rounds += 2;
    while (hi > lo + 16) {
        if (--rounds < 0) {
            qsort(v + lo, (size_t)(hi - lo + 1), sizeof(int64_t), cmp64);
            return;
        }
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < v[lo]) swap64(&v[mid], &v[lo]);
        if (v[hi] < v[lo]) swap64(&v[hi], &v[lo]);
        if (v[hi] < v[mid]) swap64(&v[hi], &v[mid]);
        int64_t pivot = v[mid];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) { /* Hoare's partition: runs of one value split evenly, staying linear */
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i <= j) { swap64(&v[i], &v[j]); i++; j--; }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return; /* between the halves: equal to the pivot, in place */
    }
    for (Py_ssize_t i = lo + 1; i <= hi; i++) { /* the last few: insertion sort */
        int64_t x = v[i];
        Py_ssize_t j = i - 1;
        while (j >= lo && v[j] > x) { v[j + 1] = v[j]; j--; }
        v[j + 1] = x;
    }
}

/* q's ranks lo and lo + 1 of v[0..n), where ranks below `from` are already in place and
 * v[from..n) holds the rest in any order. Returns lo; v is then in place up to lo. */
static Py_ssize_t quantile_ranks(int64_t *v, Py_ssize_t n, Py_ssize_t from, double q,
                                 int64_t *low, int64_t *high, double *frac) {
    double at = q * (double)(n - 1);
    Py_ssize_t lo = (Py_ssize_t)at;
    *frac = fmod(at, 1.0);
    if (lo >= from) select_kth(v + from, n - from, lo - from);
    *low = v[lo];
    int64_t m = v[lo];
    if (lo + 1 < n) {
        m = v[lo + 1];
        for (Py_ssize_t i = lo + 2; i < n; i++) m = v[i] < m ? v[i] : m;
    }
    *high = m;
    return lo;
}

static PyObject *group_stats(PyObject *self, PyObject *args) {
    Py_buffer gb, db, sb, eb, fb, bb, ib, ob;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*w*w*", &gb, &db, &sb, &eb, &fb, &bb, &ib, &ob))
        return NULL;
    PyObject *res = NULL;
    int64_t *bucket = NULL, *next = NULL;
    Py_ssize_t n = gb.len / 8, G = ob.len / 32;
    if (db.len != n * 8 || sb.len != n * 8 || eb.len != n || fb.len != n * 8 || bb.len != n * 8 ||
        ib.len != G * 10 * 8 || ob.len != G * 4 * 8) {
        PyErr_SetString(PyExc_ValueError, "group_stats: column lengths differ");
        goto done;
    }
    const int64_t *gid = gb.buf, *dur = db.buf, *slf = sb.buf;
    const int8_t *eager = eb.buf;
    const double *flops = fb.buf, *bytes = bb.buf;
    int64_t *I = ib.buf;
    double *F = ob.buf;
    int64_t *count = I, *total = I + G, *self_sum = I + 2 * G, *mn = I + 3 * G, *mx = I + 4 * G,
            *eager_sum = I + 5 * G;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (gid[i] < 0 || gid[i] >= G) {
            PyErr_SetString(PyExc_ValueError, "group_stats: group id out of range");
            goto done;
        }
    }
    bucket = PyMem_RawMalloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    next = PyMem_RawMalloc(sizeof(int64_t) * (size_t)(G ? G : 1));
    if (!bucket || !next) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = gid[i], d = dur[i];
        if (count[g] == 0 || d < mn[g]) mn[g] = d;
        if (count[g] == 0 || d > mx[g]) mx[g] = d;
        count[g]++;
        total[g] += d;
        self_sum[g] += slf[i];
        eager_sum[g] += eager[i] != 0;
        F[g] += flops[i];
        F[G + g] += bytes[i];
    }
    int64_t at = 0;
    for (Py_ssize_t g = 0; g < G; g++) { next[g] = at; at += count[g]; }
    for (Py_ssize_t i = 0; i < n; i++) bucket[next[gid[i]]++] = dur[i];
    for (Py_ssize_t g = 0; g < G; g++) {
        Py_ssize_t c = (Py_ssize_t)count[g];
        if (!c) continue;
        int64_t *v = bucket + next[g] - c;
        Py_ssize_t lo = quantile_ranks(v, c, 0, 0.5, &I[6 * G + g], &I[7 * G + g], &F[2 * G + g]);
        quantile_ranks(v, c, lo + 1, 0.95, &I[8 * G + g], &I[9 * G + g], &F[3 * G + g]);
    }
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
done:
    PyMem_RawFree(bucket);
    PyMem_RawFree(next);
    PyBuffer_Release(&gb); PyBuffer_Release(&db); PyBuffer_Release(&sb); PyBuffer_Release(&eb);
    PyBuffer_Release(&fb); PyBuffer_Release(&bb); PyBuffer_Release(&ib); PyBuffer_Release(&ob);
    return res;
}

/* gather(table, codes, out)
 *
 * out[i] = table[codes[i]] for a small uint8 (bool) table and integer codes of 1, 2, 4 or 8 bytes
 * (told apart by the codes' byte length against out's): a categorical column's per-category
 * test mapped to its rows (analyzers._match). A negative code (a missing value) gives 0. numpy's
 * take widens the codes to intp and checks each index: about 3 ms on a batch's 1.2 M events,
 * a pass of this loop a tenth of it, and the rules test dozens of patterns per batch.
 */
#define GATHER(T)                                                            \
    for (Py_ssize_t i = 0; i < n; i++) {                                     \
        int64_t c = ((const T *)cb.buf)[i];                                  \
        if (c >= m) { bad = 1; break; }                                      \
        o[i] = c < 0 ? 0 : t[c];                                             \
    }

static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer tb, cb, ob;
    if (!PyArg_ParseTuple(args, "y*y*w*", &tb, &cb, &ob)) return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = ob.len, m = tb.len;
    Py_ssize_t width = n ? cb.len / n : 1;
    if (cb.len != n * width || (width != 1 && width != 2 && width != 4 && width != 8)) {
        PyErr_SetString(PyExc_ValueError, "gather: codes and out lengths differ");
        goto done;
    }
    const uint8_t *t = tb.buf;
    uint8_t *o = ob.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    switch (width) {
        case 1: GATHER(int8_t) break;
        case 2: GATHER(int16_t) break;
        case 4: GATHER(int32_t) break;
        default: GATHER(int64_t) break;
    }
    Py_END_ALLOW_THREADS
    if (bad) { PyErr_SetString(PyExc_ValueError, "gather: code out of the table"); goto done; }
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&tb); PyBuffer_Release(&cb); PyBuffer_Release(&ob);
    return res;
}
#undef GATHER

static PyMethodDef methods[] = {
    {"nest", nest, METH_VARARGS,
     "nest(group, start, end, depth_out, parent_out, self_out): nesting within sorted groups."},
    {"lookup", lookup, METH_VARARGS,
     "lookup(plane_of, ids, table_plane, table_ids, owner, out): rows of (plane, id) keys."},
    {"sweep", sweep, METH_VARARGS,
     "sweep(starts, ends, step_start, step_end, step_end_sorted, bits, out): breakdown sweep."},
    {"group_stats", group_stats, METH_VARARGS,
     "group_stats(gid, dur, self, eager, flops, bytes, ints, floats): op tables' aggregation."},
    {"gather", gather, METH_VARARGS, "gather(table, codes, out): out[i] = table[codes[i]]."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_column_kernels",
                                    "Nesting, key-lookup, breakdown-sweep, group-statistics and gather kernels over numpy columns.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__column_kernels(void) {
    hash_key_init();
    return PyModule_Create(&moddef);
}
