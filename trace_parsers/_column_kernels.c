/* Column kernels shared by every parser (XPlane, ftrace/atrace text, Chrome JSON, Perfetto):
 * the nesting pass (depth, parent, self time of events on one timeline) and a hash join of
 * (plane, id) keys against a small table; and the step breakdown's sweep. All take numpy
 * buffers and release the GIL for their main loop; the Python wrappers are
 * trace_parsers.nesting (nest, top_type_times) and trace_parsers.xplane._lookup.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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

static PyMethodDef methods[] = {
    {"nest", nest, METH_VARARGS,
     "nest(group, start, end, depth_out, parent_out, self_out): nesting within sorted groups."},
    {"lookup", lookup, METH_VARARGS,
     "lookup(plane_of, ids, table_plane, table_ids, owner, out): rows of (plane, id) keys."},
    {"sweep", sweep, METH_VARARGS,
     "sweep(starts, ends, step_start, step_end, step_end_sorted, bits, out): breakdown sweep."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_column_kernels",
                                    "Nesting, key-lookup and breakdown-sweep kernels over numpy columns.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__column_kernels(void) {
    hash_key_init();
    return PyModule_Create(&moddef);
}
