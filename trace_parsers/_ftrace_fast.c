/* ftrace / atrace text (the systrace text format) into flat columns, in one pass.
 *
 * Why C: an Android capture holds millions of ftrace lines. Tokenizing them with Arrow's RE2
 * and pairing B/E markers with array arithmetic still cost ~4 us per line, mostly in building
 * and converting intermediate arrays; this reader walks each line once, interns repeated
 * strings (task, event and section names) in its own hash table, keeps the per-thread B/E
 * stacks, and hands trace_parsers/_ftrace.py finished slice, counter and sched columns.
 *
 * Line grammar, exactly the regex the Python reader used (Perfetto's systrace tokenizer):
 *   ^\s*(task.+?)-(tid\d+)\s+(?:\(\s*(tgid\d+|-----)\)\s+)?\[(cpu\d+)\]\s+
 *   (?:(flags[\w.]{4,5})\s+)?(ts\d+(?:\.\d+)?):\s+(event[\w.]+):\s?(payload.*)$
 * with RE2's ASCII classes (\s = [\t\n\f\r ], \w = [0-9A-Za-z_]); the task is the shortest
 * prefix for which the rest matches. Markers (events tracing_mark_write, 0, print):
 *   ^\s*(kind[A-Za-z])(?:\|(pid-?\d*)(?:\|(rest.*?))?)?\s*$
 * Lines end at \n, \r\n or \r. Every read is bounded by the line; nothing is NUL-terminated.
 */
#include "_cols.h"
#include <math.h>
#include <stdlib.h>

/* Bytes read between two releases of the GIL (a few ms of work): a long file never stops the
 * process's other threads for longer than that. */
#define YIELD_BYTES (4 << 20)

/* ---------------------------------------------------------------- threads and their B stacks */

typedef struct {
    int64_t ts, pid;
    int32_t name;
} Open;

typedef struct {
    int64_t tid, tgid; /* tgid: first one seen on this thread's lines, -1 if none */
    int32_t task;      /* code of the last task name that is not "<...>", -1 if none */
    Open *stack;
    size_t depth, cap;
} Thread;

typedef struct {
    Thread *items;
    size_t len, cap;
    int32_t *index; /* open addressing on tid -> item, -1 empty */
    size_t icap;
} Threads;

static int threads_rehash(Threads *t, size_t icap) {
    int32_t *index = PyMem_Malloc(icap * sizeof(int32_t));
    if (!index) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < icap; i++) index[i] = -1;
    for (size_t k = 0; k < t->len; k++) {
        size_t j = hash_u64((uint64_t)t->items[k].tid) & (icap - 1);
        while (index[j] >= 0) j = (j + 1) & (icap - 1);
        index[j] = (int32_t)k;
    }
    PyMem_Free(t->index);
    t->index = index;
    t->icap = icap;
    return 0;
}

/* The thread of tid (created on first sight); NULL on memory error. */
static Thread *thread_of(Threads *t, int64_t tid, int32_t *which) {
    size_t j = hash_u64((uint64_t)tid) & (t->icap - 1);
    while (t->index[j] >= 0) {
        Thread *th = &t->items[t->index[j]];
        if (th->tid == tid) { *which = t->index[j]; return th; }
        j = (j + 1) & (t->icap - 1);
    }
    if (t->len == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        Thread *items = PyMem_Realloc(t->items, cap * sizeof(Thread));
        if (!items) { PyErr_NoMemory(); return NULL; }
        t->items = items;
        t->cap = cap;
    }
    *which = (int32_t)t->len;
    t->index[j] = (int32_t)t->len;
    Thread *th = &t->items[t->len++];
    *th = (Thread){tid, -1, -1, NULL, 0, 0};
    if (t->len * 2 > t->icap) {
        if (threads_rehash(t, t->icap * 2) < 0) return NULL;
    }
    return &t->items[*which];
}

static void threads_free(Threads *t) {
    for (size_t k = 0; k < t->len; k++) PyMem_Free(t->items[k].stack);
    PyMem_Free(t->items);
    PyMem_Free(t->index);
}

/* ---------------------------------------------------------------- output */

typedef struct {
    Interner str;
    Col event_counts; /* int64 per string code: lines with this event name (non-marker lines) */
    Threads th;
    /* slices: B/E pairs (kind 0) and instants (kind 2) */
    Col s_pid, s_tid, s_start, s_end, s_name, s_kind;
    /* counters from C markers */
    Col c_pid, c_name, c_ts, c_val;
    /* async S/F markers, paired by the caller (few) */
    Col a_kind, a_pid, a_name, a_cookie, a_ts;
    /* sched_switch lines that parse */
    Col w_cpu, w_ts, w_state, w_comm, w_tid;
    /* cpu_frequency / cpu_idle lines that parse */
    Col f_event, f_cpu, f_ts, f_state;
    int64_t lines, skipped, clock_sync, markers, unknown_marker, unmatched_end, bad_counter,
        sched_ok, sched_bad, first, last;
    int32_t code_unknown_task, code_empty, code_none;
} Ctx;

/* ---------------------------------------------------------------- lexing */

static inline int is_s(char c) { /* RE2 \s */
    return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r';
}
static inline int is_d(char c) { return c >= '0' && c <= '9'; }
static inline int is_w(char c) {
    return is_d(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static inline int is_space(char c) { return is_s(c) || c == '\v'; } /* for trimming */

/* Digit string -> value; empty, more than 18 digits (or a bare "-") -> -1. */
static int64_t to_int(const char *p, const char *e) {
    int neg = p < e && *p == '-';
    if (neg) p++;
    if (e - p < 1 || e - p > 18) return -1;
    int64_t v = 0;
    for (; p < e; p++) v = v * 10 + (*p - '0');
    return neg ? -v : v;
}

static inline const char *skip_d(const char *q, const char *le) {
    while (q < le && is_d(*q)) q++;
    return q;
}
static inline const char *skip_s(const char *q, const char *le) {
    while (q < le && is_s(*q)) q++;
    return q;
}

typedef struct {
    const char *tid, *tid_e, *tgid, *tgid_e, *cpu, *cpu_e, *event, *event_e, *pay, *pay_e;
    int64_t ts;
} Fields;

/* Seconds "123.456789" -> ns (rounded at the tenth fraction digit); 0 if it overflows. */
static int seconds_to_ns(const char *ip, const char *ip_e, const char *fp, const char *fp_e,
                         int64_t *out) {
    int64_t v = 0;
    for (const char *p = ip; p < ip_e; p++) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p - '0', &v)) return 0;
    }
    if (__builtin_mul_overflow(v, 1000000000LL, &v)) return 0;
    int64_t frac = 0, scale = 100000000LL;
    const char *p = fp;
    for (; p < fp_e && scale > 0; p++, scale /= 10) frac += (*p - '0') * scale;
    if (p < fp_e && *p >= '5') frac++;
    return !__builtin_add_overflow(v, frac, out);
}

/* ts, event and payload: "<ts>: <event>: <payload>" from q. */
static int match_ts(const char *q, const char *le, Fields *f) {
    const char *ip = q;
    q = skip_d(q, le);
    if (q == ip) return 0;
    const char *ip_e = q, *fp = q, *fp_e = q;
    if (q + 1 < le && *q == '.' && is_d(q[1])) {
        fp = q + 1;
        q = fp_e = skip_d(fp, le);
    }
    if (q >= le || *q != ':') return 0;
    q++;
    const char *s = q;
    q = skip_s(q, le);
    if (q == s) return 0;
    f->event = q;
    while (q < le && (is_w(*q) || *q == '.')) q++;
    if (q == f->event || q >= le || *q != ':') return 0;
    f->event_e = q++;
    if (q < le && is_s(*q)) q++;
    f->pay = q;
    f->pay_e = le;
    return seconds_to_ns(ip, ip_e, fp, fp_e, &f->ts);
}

/* Everything after the task, from its '-' at d. */
static int match_rest(const char *d, const char *le, Fields *f) {
    const char *q = d + 1;
    f->tid = q;
    q = skip_d(q, le);
    if (q == f->tid) return 0;
    f->tid_e = q;
    const char *s = q;
    q = skip_s(q, le);
    if (q == s) return 0;
    f->tgid = f->tgid_e = NULL;
    if (q < le && *q == '(') {
        q = skip_s(q + 1, le);
        if (le - q >= 5 && memcmp(q, "-----", 5) == 0) {
            q += 5;
        } else {
            f->tgid = q;
            q = skip_d(q, le);
            if (q == f->tgid) return 0;
            f->tgid_e = q;
        }
        if (q >= le || *q != ')') return 0;
        s = ++q;
        q = skip_s(q, le);
        if (q == s) return 0;
    }
    if (q >= le || *q != '[') return 0;
    f->cpu = ++q;
    q = skip_d(q, le);
    if (q == f->cpu || q >= le || *q != ']') return 0;
    f->cpu_e = q++;
    s = q;
    q = skip_s(q, le);
    if (q == s) return 0;
    const char *r = q; /* optional flags: 4 or 5 of [\w.] and whitespace, tried first */
    while (r < le && r - q < 6 && (is_w(*r) || *r == '.')) r++;
    if ((r - q == 4 || r - q == 5) && r < le && is_s(*r) && match_ts(skip_s(r, le), le, f))
        return 1;
    return match_ts(q, le, f);
}

static int match_line(const char *ls, const char *le, Fields *f, const char **task_e) {
    for (const char *d = ls + 1; d < le; d++) {
        d = memchr(d, '-', (size_t)(le - d));
        if (!d) return 0;
        if (match_rest(d, le, f)) {
            *task_e = d;
            return 1;
        }
    }
    return 0;
}

static const char *find(const char *p, const char *e, const char *needle, size_t n) {
    if ((size_t)(e - p) < n) return NULL;
    return memmem(p, (size_t)(e - p), needle, n);
}

/* ---------------------------------------------------------------- events */

static int64_t pid_or_tgid(int64_t pid, int64_t tgid, int32_t thread) {
    if (pid >= 0) return pid;
    return tgid >= 0 ? tgid : -2 - (int64_t)thread; /* resolved once the block is read */
}

/* The last '|' of [r, re) in *bar; 0 if there is none. */
static int split_last(const char *r, const char *re, const char **bar) {
    for (const char *p = re; p > r; p--) {
        if (p[-1] == '|') { *bar = p - 1; return 1; }
    }
    return 0;
}

static int marker(Ctx *x, Thread *th, int32_t thread, int64_t tgid, int64_t ts, const char *p,
                  const char *e) {
    p = skip_s(p, e);
    if (p >= e || !((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) {
        x->unknown_marker++;
        return 0;
    }
    char kind = *p++;
    int64_t pid = -1;
    const char *rest = NULL, *rest_e = NULL;
    if (p < e && *p == '|') {
        const char *ps = ++p;
        if (p < e && *p == '-') p++;
        p = skip_d(p, e);
        pid = to_int(ps, p);
        if (p < e && *p == '|') {
            rest = ++p;
            rest_e = e;
            while (rest_e > rest && is_s(rest_e[-1])) rest_e--;
            p = e;
        }
    }
    if (skip_s(p, e) != e || !strchr("BECSFINGH", kind)) {
        x->unknown_marker++;
        return 0;
    }
    x->markers++;
    pid = pid_or_tgid(pid, tgid, thread);
    if (kind == 'E') {
        if (!th->depth) {
            x->unmatched_end++;
            return 0;
        }
        Open *o = &th->stack[--th->depth];
        return push_i64(&x->s_pid, o->pid) | push_i64(&x->s_tid, th->tid) |
               push_i64(&x->s_start, o->ts) | push_i64(&x->s_end, ts) |
               push_i32(&x->s_name, o->name) | push_i8(&x->s_kind, 0);
    }
    int32_t whole = rest ? intern(&x->str, rest, rest_e - rest) : x->code_empty;
    if (whole < 0) return -1;
    if (kind == 'B') {
        if (th->depth == th->cap) {
            size_t cap = th->cap ? th->cap * 2 : 16;
            Open *s = PyMem_Realloc(th->stack, cap * sizeof(Open));
            if (!s) { PyErr_NoMemory(); return -1; }
            th->stack = s;
            th->cap = cap;
        }
        th->stack[th->depth++] = (Open){ts, pid, whole};
        return 0;
    }
    if (kind == 'I')
        return push_i64(&x->s_pid, pid) | push_i64(&x->s_tid, th->tid) |
               push_i64(&x->s_start, ts) | push_i64(&x->s_end, ts) | push_i32(&x->s_name, whole) |
               push_i8(&x->s_kind, 2);
    const char *bar = NULL;
    int has_bar = rest && split_last(rest, rest_e, &bar);
    int32_t name = has_bar ? intern(&x->str, rest, bar - rest) : x->code_empty;
    if (name < 0) return -1;
    if (kind == 'C') {
        char num[64];
        size_t n = has_bar ? (size_t)(rest_e - bar - 1) : 0;
        if (!n || n >= sizeof(num)) { x->bad_counter++; return 0; }
        memcpy(num, bar + 1, n);
        num[n] = 0;
        char *end;
        double v = strtod(num, &end);
        while (end < num + n && is_space(*end)) end++;
        if (end != num + n || end == num || isnan(v)) { x->bad_counter++; return 0; }
        return push_i64(&x->c_pid, pid) | push_i32(&x->c_name, name) | push_i64(&x->c_ts, ts) |
               push_f64(&x->c_val, v);
    }
    if (kind == 'S' || kind == 'F') {
        /* a missing cookie reads "None", as str(None) did in the Python reader */
        int32_t cookie = has_bar ? intern(&x->str, bar + 1, rest_e - bar - 1) : x->code_none;
        if (cookie < 0) return -1;
        return push_i8(&x->a_kind, (int8_t)kind) | push_i64(&x->a_pid, pid) |
               push_i32(&x->a_name, name) | push_i32(&x->a_cookie, cookie) |
               push_i64(&x->a_ts, ts);
    }
    /* N, G, H: track markers, kept as instants named by the field before the last */
    return push_i64(&x->s_pid, pid) | push_i64(&x->s_tid, th->tid) | push_i64(&x->s_start, ts) |
           push_i64(&x->s_end, ts) | push_i32(&x->s_name, name) | push_i8(&x->s_kind, 2);
}

/* "next_pid=<digit>" preceded by whitespace starting at y (the \s+next_pid=\d of the regex). */
static int is_next_pid(const char *p, const char *y, const char *e) {
    return y > p && is_s(y[-1]) && e - y >= 10 && memcmp(y, "next_pid=", 9) == 0 && is_d(y[9]);
}

/* prev_state=(\S*).*next_comm=(.*?)\s+next_pid=(\d+), matched as RE2 does, in linear time:
 * the first prev_state= (a later one can only match if the first does); the greedy .* takes
 * the last next_comm= that some \s+next_pid=\d follows, and \S* gives back what overlaps
 * it; the lazy comm ends at the first such next_pid= after it (at the whitespace before it).
 * A crafted line cannot make it slow. */
static int sched_switch(Ctx *x, const char *cpu, const char *cpu_e, int64_t ts, const char *p,
                        const char *e) {
    const char *ps = find(p, e, "prev_state=", 11), *last_y = NULL;
    if (!ps) goto bad;
    const char *v = ps + 11, *ve = v;
    while (ve < e && !is_s(*ve)) ve++;
    for (const char *y = e - 10; y > ve && !last_y; y--)
        if (is_next_pid(ve, y, e)) last_y = y;
    if (!last_y) goto bad;
    for (const char *c = last_y - 11; c >= v; c--) { /* cs = c + 10 must lie before last_y */
        if (memcmp(c, "next_comm=", 10) != 0) continue;
        if (ve > c) ve = c;
        const char *cs = c + 10, *y = cs + 1;
        while (!is_next_pid(cs, y, e)) y++; /* stops at last_y at the latest */
        const char *w = y - 1;
        while (w > cs && is_s(w[-1])) w--;
        int32_t state = intern(&x->str, v, ve - v), comm = intern(&x->str, cs, w - cs);
        if (state < 0 || comm < 0) return -1;
        x->sched_ok++;
        return push_i64(&x->w_cpu, to_int(cpu, cpu_e)) | push_i64(&x->w_ts, ts) |
               push_i32(&x->w_state, state) | push_i32(&x->w_comm, comm) |
               push_i64(&x->w_tid, to_int(y + 9, skip_d(y + 9, e)));
    }
bad:
    x->sched_bad++;
    return 0;
}

/* state=(\d+)\s+cpu_id=(\d+), leftmost. */
static int cpu_counter(Ctx *x, int32_t event, int64_t ts, const char *p, const char *e) {
    for (const char *s = find(p, e, "state=", 6); s; s = find(s + 1, e, "state=", 6)) {
        const char *d = s + 6, *de = skip_d(d, e);
        if (de == d || de >= e || !is_s(*de)) continue;
        const char *c = skip_s(de, e);
        if (e - c < 8 || memcmp(c, "cpu_id=", 7) != 0 || !is_d(c[7])) continue;
        const char *ce = skip_d(c + 7, e);
        int32_t cpu = intern(&x->str, c + 7, ce - c - 7);
        if (cpu < 0) return -1;
        return push_i32(&x->f_event, event) | push_i32(&x->f_cpu, cpu) | push_i64(&x->f_ts, ts) |
               push_i64(&x->f_state, to_int(d, de));
    }
    return 0;
}

static int eq(const char *p, const char *e, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(e - p) == n && memcmp(p, lit, n) == 0;
}

static int line(Ctx *x, const char *ls, const char *le) {
    Fields f;
    const char *task_e;
    if (!match_line(ls, le, &f, &task_e)) {
        const char *t = ls;
        while (t < le && is_space(*t)) t++;
        if (t < le && *t != '#') x->skipped++;
        return 0;
    }
    x->lines++;
    int64_t tid = to_int(f.tid, f.tid_e), tgid = f.tgid ? to_int(f.tgid, f.tgid_e) : -1;
    int32_t thread;
    Thread *th = thread_of(&x->th, tid, &thread);
    if (!th) return -1;
    const char *ts_ = ls, *te = task_e;
    while (ts_ < te && is_space(*ts_)) ts_++;
    while (te > ts_ && is_space(te[-1])) te--;
    int32_t task = intern(&x->str, ts_, te - ts_);
    if (task < 0) return -1;
    if (task != x->code_unknown_task) th->task = task;
    if (th->tgid < 0 && tgid >= 0) th->tgid = tgid;
    int is_marker = eq(f.event, f.event_e, "tracing_mark_write") || eq(f.event, f.event_e, "0") ||
                    eq(f.event, f.event_e, "print");
    if (is_marker && find(f.pay, f.pay_e, "trace_event_clock_sync", 22)) {
        x->clock_sync++;
        return 0; /* a clock-sync marker (one sample has a 0.0 timestamp) never sets the span */
    }
    if (x->first > f.ts) x->first = f.ts;
    if (x->last < f.ts) x->last = f.ts;
    if (is_marker) return marker(x, th, thread, tgid, f.ts, f.pay, f.pay_e);
    int32_t event = intern(&x->str, f.event, f.event_e - f.event);
    if (event < 0) return -1;
    while (x->event_counts.len <= (size_t)event)
        if (push_i64(&x->event_counts, 0) < 0) return -1;
    ((int64_t *)x->event_counts.data)[event]++;
    if (eq(f.event, f.event_e, "sched_switch"))
        return sched_switch(x, f.cpu, f.cpu_e, f.ts, f.pay, f.pay_e);
    if (eq(f.event, f.event_e, "cpu_frequency") || eq(f.event, f.event_e, "cpu_idle"))
        return cpu_counter(x, event, f.ts, f.pay, f.pay_e);
    return 0;
}

static void resolve_pids(Ctx *x, Col *c) {
    int64_t *v = (int64_t *)c->data;
    for (size_t i = 0; i < c->len; i++) {
        if (v[i] > -2) continue;
        Thread *th = &x->th.items[-2 - v[i]];
        v[i] = th->tgid >= 0 ? th->tgid : th->tid;
    }
}

#define COLS(X)                                                                                    \
    X(s_pid, int64_t) X(s_tid, int64_t) X(s_start, int64_t) X(s_end, int64_t) X(s_name, int32_t)   \
    X(s_kind, int8_t) X(c_pid, int64_t) X(c_name, int32_t) X(c_ts, int64_t) X(c_val, double)       \
    X(a_kind, int8_t) X(a_pid, int64_t) X(a_name, int32_t) X(a_cookie, int32_t) X(a_ts, int64_t)   \
    X(w_cpu, int64_t) X(w_ts, int64_t) X(w_state, int32_t) X(w_comm, int32_t) X(w_tid, int64_t)    \
    X(f_event, int32_t) X(f_cpu, int32_t) X(f_ts, int64_t) X(f_state, int64_t)

static int put(PyObject *d, const char *key, PyObject *v) {
    if (!v) return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

/* Threads (their last task name) and unclosed B sections as columns. */
static int put_threads(Ctx *x, PyObject *out) {
    Col tid = {0}, task = {0}, o_tid = {0}, o_ts = {0}, o_name = {0}, o_pid = {0};
    W(tid, int64_t); W(task, int32_t);
    W(o_tid, int64_t); W(o_ts, int64_t); W(o_name, int32_t); W(o_pid, int64_t);
    int rc = 0;
    for (size_t k = 0; k < x->th.len && rc == 0; k++) {
        Thread *th = &x->th.items[k];
        rc = push_i64(&tid, th->tid) | push_i32(&task, th->task);
        for (size_t i = 0; i < th->depth && rc == 0; i++)
            rc = push_i64(&o_tid, th->tid) | push_i64(&o_ts, th->stack[i].ts) |
                 push_i32(&o_name, th->stack[i].name) | push_i64(&o_pid, th->stack[i].pid);
    }
    if (rc == 0) resolve_pids(x, &o_pid);
    if (rc == 0)
        rc = put(out, "t_tid", col_take(&tid)) | put(out, "t_task", col_take(&task)) |
             put(out, "o_tid", col_take(&o_tid)) |
             put(out, "o_ts", col_take(&o_ts)) | put(out, "o_name", col_take(&o_name)) |
             put(out, "o_pid", col_take(&o_pid));
    col_free(&tid); col_free(&task);
    col_free(&o_tid); col_free(&o_ts); col_free(&o_name); col_free(&o_pid);
    return rc ? -1 : 0;
}

static PyObject *read_ftrace(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Ctx x;
    memset(&x, 0, sizeof(x));
#define INIT(name, type) W(x.name, type);
    COLS(INIT)
#undef INIT
    W(x.event_counts, int64_t);
    x.first = INT64_MAX;
    x.last = INT64_MIN;
    PyObject *out = NULL, *res = NULL;
    if (interner_init(&x.str) < 0 || threads_rehash(&x.th, 256) < 0) goto done;
    x.code_unknown_task = intern(&x.str, "<...>", 5);
    x.code_empty = intern(&x.str, "", 0);
    x.code_none = intern(&x.str, "None", 4);
    if (x.code_unknown_task < 0 || x.code_empty < 0 || x.code_none < 0) goto done;
    const char *p = view.buf, *end = p + view.len;
    /* The next \n and \r are remembered until passed: searching from each line start to the
     * end of the buffer made a file of \r-only lines quadratic (320 k lines: 43 s). */
    const char *nl = memchr(p, '\n', (size_t)(end - p)), *cr = memchr(p, '\r', (size_t)(end - p));
    int64_t since_yield = 0;
    while (p < end) {
        if (nl && nl < p) nl = memchr(p, '\n', (size_t)(end - p));
        if (cr && cr < p) cr = memchr(p, '\r', (size_t)(end - p));
        const char *le = nl ? nl : end, *next = nl ? nl + 1 : end;
        if (cr && cr < le) {
            le = cr;
            next = cr + 1 < end && cr[1] == '\n' ? cr + 2 : cr + 1;
        }
        if (line(&x, p, le) < 0) goto done;
        since_yield += next - p;
        if (since_yield > YIELD_BYTES) { /* let the server's other threads run (/healthz) */
            since_yield = 0;
            Py_BEGIN_ALLOW_THREADS
            Py_END_ALLOW_THREADS
        }
        p = next;
    }
    Col *pids[] = {&x.s_pid, &x.c_pid, &x.a_pid};
    for (size_t i = 0; i < 3; i++) resolve_pids(&x, pids[i]);
    if (!(out = PyDict_New())) goto done;
    if (put_threads(&x, out) < 0) goto done;
#define PUT(name, type) if (put(out, #name, col_take(&x.name)) < 0) goto done;
    COLS(PUT)
#undef PUT
    if (put(out, "event_counts", col_take(&x.event_counts)) < 0 ||
        PyDict_SetItemString(out, "strings", x.str.list) < 0)
        goto done;
    PyObject *first = x.lines > x.clock_sync ? PyLong_FromLongLong(x.first) : Py_NewRef(Py_None);
    PyObject *last = x.lines > x.clock_sync ? PyLong_FromLongLong(x.last) : Py_NewRef(Py_None);
    if (put(out, "first", first) < 0 || put(out, "last", last) < 0) goto done;
    const char *names[] = {"lines", "skipped_lines", "clock_sync", "markers", "unknown_marker",
                           "unmatched_end", "bad_counter", "sched_switch", "bad_sched_switch"};
    int64_t values[] = {x.lines, x.skipped, x.clock_sync, x.markers, x.unknown_marker,
                        x.unmatched_end, x.bad_counter, x.sched_ok, x.sched_bad};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
        if (put(out, names[i], PyLong_FromLongLong(values[i])) < 0) goto done;
    res = out;
    out = NULL;
done:
#define FREE(name, type) col_free(&x.name);
    COLS(FREE)
#undef FREE
    col_free(&x.event_counts);
    interner_free(&x.str);
    threads_free(&x.th);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return res;
}

/* unescape_js(buffer) -> bytes: the body of old systrace HTML's JS string in one pass:
 * backslash-n-backslash-newline and backslash-n become a newline, backslash-quote a quote. */
static PyObject *unescape_js(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, view.len);
    if (out) {
        const char *p = view.buf, *e = p + view.len;
        char *o = PyBytes_AS_STRING(out), *o0 = o;
        while (p < e) {
            const char *b = memchr(p, '\\', (size_t)(e - p));
            const char *stop = b ? b : e;
            memcpy(o, p, (size_t)(stop - p));
            o += stop - p;
            p = stop;
            if (!b) break;
            if (e - p >= 4 && p[1] == 'n' && p[2] == '\\' && p[3] == '\n') { *o++ = '\n'; p += 4; }
            else if (e - p >= 2 && p[1] == 'n') { *o++ = '\n'; p += 2; }
            else if (e - p >= 2 && p[1] == '"') { *o++ = '"'; p += 2; }
            else { *o++ = *p++; }
        }
        if (_PyBytes_Resize(&out, o - o0) < 0) out = NULL;
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"unescape_js", unescape_js, METH_O,
     "unescape_js(buffer) -> bytes: a systrace HTML JS string body, unescaped."},
    {"read_ftrace", read_ftrace, METH_O,
     "read_ftrace(buffer) -> dict of column buffers (slices, counters, async markers, sched, cpu "
     "counters, threads, unclosed sections), interned strings and counts."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_ftrace_fast",
                                    "Fast ftrace/atrace text reader (see trace_parsers/_ftrace.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__ftrace_fast(void) {
    hash_key_init();
    return PyModule_Create(&moddef);
}
