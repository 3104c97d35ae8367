/* PyTorch profiler (Kineto) trace JSON into flat columns, in one pass.
 *
 * Why C: ``json.loads`` made a dict per event and a Python loop typed them, 2.4-3 s for the
 * V100 rank's 33 MB where HTA's own load takes 3.4 s. This reader checks the whole document
 * as strict JSON (RFC 8259; and NaN, Infinity and -Infinity, which Python's json reads too),
 * walks the elements of ``traceEvents`` once, and hands trace_parsers/kineto.py:
 *
 * - per element (its place is its index): whether it is an object; ``ph``, ``name`` and
 *   ``cat`` as string codes (-1: absent or not a string); ``ts`` and ``dur`` as ns with their
 *   kind (absent, integer µs, decimal µs, bad: not a number or out of int64 ns, or an end
 *   past it); ``pid`` and ``tid`` as an integer or a string code;
 * - per member of an element's ``args`` object: the element, the key's code, the value's
 *   kind (int64, string, boolean, double, or JSON text: arrays, objects, null and integers
 *   beyond int64, whose text is interned on its own) and value;
 * - every other member of the top-level object as its key and the byte span of its value
 *   (the header is small: Python's json reads it).
 *
 * Times are read exactly from their text: an integer or decimal µs is whole * 1000 plus the
 * first three digits of the fraction (a double of an epoch µs time is off by up to 0.25 µs);
 * only a number with an exponent goes through a double. Strings are interned by their bytes
 * as written and decoded (escapes, surrogate pairs; invalid UTF-8 and lone surrogates become
 * U+FFFD) once each, so two spellings of one string may have two codes: the caller merges
 * them. Every read is bounded by the buffer; nesting deeper than MAX_DEPTH is an error, as is
 * a row past ``max_rows`` (elements plus args).
 */
#include "_cols.h"
#include <math.h>
#include <stdlib.h>

/* Bytes read between two releases of the GIL (a few ms of work). */
#define YIELD_BYTES (4 << 20)
#define MAX_DEPTH 512

enum { T_MISSING = 0, T_INT = 1, T_DECIMAL = 2, T_BAD = 3 };
enum { A_INT = 0, A_STR = 1, A_BOOL = 2, A_JSON = 3, A_DOUBLE = 4 };

#define COLS(X)                                                                                  \
    X(ev_object, int8_t) X(ev_ph, int32_t) X(ev_name, int32_t) X(ev_cat, int32_t)             \
    X(ev_ts, int64_t) X(ev_dur, int64_t) X(ev_ts_kind, int8_t) X(ev_dur_kind, int8_t)         \
    X(ev_pid, int64_t) X(ev_tid, int64_t) X(ev_pid_str, int32_t) X(ev_tid_str, int32_t)       \
    X(ag_event, int64_t) X(ag_key, int32_t) X(ag_kind, int8_t) X(ag_int, int64_t)             \
    X(ag_float, double) X(ag_code, int32_t)

/* A direct-mapped memo in front of the string interner (see intern_string). */
#define MEMO_SLOTS 1024

typedef struct {
    const char *p;
    Py_ssize_t n;
    int32_t code;
} Memo;

typedef struct {
    const char *base, *end, *yielded;
    Interner str; /* strings: names, categories, keys, string values */
    Interner raw; /* JSON text of arrays, objects, null and big integers in args */
    Memo *memo;   /* MEMO_SLOTS, in front of str */
    int64_t max_rows;
#define DECL(name, type) Col name;
    COLS(DECL)
#undef DECL
} Reader;

static int fail(Reader *r, const char *at, const char *what) {
    PyErr_Format(PyExc_ValueError, "%s at byte %zd", what, (Py_ssize_t)(at - r->base));
    return -1;
}

static inline const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits at p (the caller checked there are 4 bytes), or -1. */
static int32_t hex4(const char *p) {
    int32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* ---------------------------------------------------------------- strings */

/* The string whose opening quote is at *pp: [*s, *s + *n) its body as written; *pp past the
 * closing quote. */
/* Whether any byte of x is below n (n <= 128), or equal to b: exact, 8 bytes at once. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t below(uint64_t x, uint8_t n) { return (x - ONES * n) & ~x & HIGHS; }
static inline uint64_t equal(uint64_t x, uint8_t b) { return below(x ^ (ONES * b), 1); }

static int scan_string(Reader *r, const char **pp, const char **s, Py_ssize_t *n) {
    const char *p = *pp + 1, *e = r->end;
    *s = p;
    for (;;) {
        for (uint64_t x; e - p >= 8; p += 8) { /* to the block that holds a quote, backslash or
                                                * control character */
            memcpy(&x, p, 8);
            if (equal(x, '"') | equal(x, '\\') | below(x, 0x20)) break;
        }
        while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        if (p >= e) return fail(r, *pp, "unterminated string");
        if (*p == '"') break;
        if (*p != '\\') return fail(r, p, "control character in a string");
        if (e - p < 2) return fail(r, p, "unterminated string");
        char c = p[1];
        if (c == 'u') {
            if (e - p < 6 || hex4(p + 2) < 0) return fail(r, p, "bad \\u escape");
            p += 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                   c == 'r' || c == 't') {
            p += 2;
        } else {
            return fail(r, p, "bad escape in a string");
        }
    }
    *n = p - *s;
    *pp = p + 1;
    return 0;
}

static char *put_utf8(char *o, int32_t cp) {
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* A string body as written (checked by scan_string) -> str. Unescaped UTF-8 is never longer
 * than its escaped form (\uXXXX: 6 bytes for at most 3; a pair: 12 for 4). */
static PyObject *decode_json_string(const char *p, Py_ssize_t n) {
    if (!memchr(p, '\\', (size_t)n)) return PyUnicode_DecodeUTF8(p, n, "replace");
    char *buf = PyMem_Malloc((size_t)n + 1), *o = buf;
    if (!buf) return PyErr_NoMemory();
    const char *e = p + n;
    while (p < e) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        char c = p[1];
        p += 2;
        switch (c) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            int32_t cp = hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && e - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                int32_t lo = hex4(p + 2);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate */
            o = put_utf8(o, cp);
            break;
        }
        default: *o++ = c; /* " \ / */
        }
    }
    PyObject *out = PyUnicode_DecodeUTF8(buf, o - buf, "replace");
    PyMem_Free(buf);
    return out;
}

/* A direct-mapped memo in front of an interner: the keys and values of one kind of event
 * repeat, so most strings are found here by a cheap hash and one memcmp, without the
 * interner's keyed hash. A collision only misses the memo (the interner still answers). */
static inline size_t memo_slot(const char *p, Py_ssize_t n) {
    uint64_t a = 0, b = 0;
    memcpy(&a, p, n < 8 ? (size_t)n : 8);
    if (n > 8) memcpy(&b, p + n - 8, 8);
    return (size_t)((a * 0x9E3779B97F4A7C15ULL ^ b * 0xC2B2AE3D27D4EB4FULL ^ (uint64_t)n) >> 40) &
           (MEMO_SLOTS - 1);
}

/* A JSON string body's code (the memo first). */
static int32_t intern_string(Interner *t, Memo *memo, const char *p, Py_ssize_t n) {
    Memo *m = &memo[memo_slot(p, n)];
    if (m->p && m->n == n && memcmp(m->p, p, (size_t)n) == 0) return m->code;
    int32_t code = intern_as(t, p, n, decode_json_string);
    if (code >= 0) *m = (Memo){p, n, code};
    return code;
}

/* ---------------------------------------------------------------- numbers */

/* A JSON number at *pp; *is_int: no fraction, no exponent. */
static int scan_number(Reader *r, const char **pp, int *is_int) {
    const char *p = *pp, *e = r->end;
    if (p < e && *p == '-') p++;
    if (p < e && *p == '0') {
        p++;
    } else if (p < e && *p >= '1' && *p <= '9') {
        while (p < e && is_digit(*p)) p++;
    } else {
        return fail(r, *pp, "bad number");
    }
    *is_int = 1;
    if (p < e && *p == '.') {
        p++;
        if (p >= e || !is_digit(*p)) return fail(r, *pp, "bad number");
        while (p < e && is_digit(*p)) p++;
        *is_int = 0;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !is_digit(*p)) return fail(r, *pp, "bad number");
        while (p < e && is_digit(*p)) p++;
        *is_int = 0;
    }
    *pp = p;
    return 0;
}

/* An integer's text [s, t) (sign and digits) -> *out; -1 beyond int64. */
static int to_int64(const char *s, const char *t, int64_t *out) {
    int neg = s < t && *s == '-';
    if (neg) s++;
    uint64_t v = 0;
    for (; s < t; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return -1;
        *out = v ? -(int64_t)(v - 1) - 1 : 0;
    } else {
        if (v > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)v;
    }
    return 0;
}

/* A number's text [s, t) as Python's float() reads it (correctly rounded, any locale). */
static double to_double(const char *s, const char *t) {
    char small[64], *buf = small;
    size_t n = (size_t)(t - s);
    if (n >= sizeof small && !(buf = PyMem_Malloc(n + 1))) return NAN;
    memcpy(buf, s, n);
    buf[n] = 0;
    double d = PyOS_string_to_double(buf, NULL, NULL); /* overflow: +-inf, no exception */
    if (buf != small) PyMem_Free(buf);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NAN;
    }
    return d;
}

/* A time in µs, the number [s, t), -> *ns; -1 outside int64 ns (or not finite). */
static int time_ns(const char *s, const char *t, int is_int, int64_t *ns) {
    int64_t v;
    if (is_int) return to_int64(s, t, &v) < 0 || __builtin_mul_overflow(v, 1000, ns) ? -1 : 0;
    const char *dot = memchr(s, '.', (size_t)(t - s)), *q;
    for (q = s; q < t && *q != 'e' && *q != 'E'; q++) {}
    if (q == t) { /* whole.fraction, exactly */
        int64_t whole, frac = 0;
        if (to_int64(s, dot, &whole) < 0 || __builtin_mul_overflow(whole, 1000, &whole)) return -1;
        const char *f = dot + 1;
        for (int i = 0; i < 3; i++) frac = frac * 10 + (f < t ? *f++ - '0' : 0);
        return (*s == '-' ? __builtin_sub_overflow(whole, frac, ns)
                          : __builtin_add_overflow(whole, frac, ns))
                   ? -1
                   : 0;
    }
    double d = to_double(s, t) * 1000;
    if (!(fabs(d) < 9223372036854775808.0)) return -1; /* NaN fails too */
    *ns = (int64_t)d;
    return 0;
}

/* ---------------------------------------------------------------- values */

static int literal(Reader *r, const char **pp, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - *pp) < n || memcmp(*pp, word, n) != 0)
        return fail(r, *pp, "unexpected character");
    *pp += n;
    return 0;
}

/* The special numbers Python's json reads: NaN, Infinity, -Infinity (0: none here). */
static int special_number(const char *p, const char *e) {
    return (*p == 'N') || (*p == 'I') || (*p == '-' && e - p > 1 && p[1] == 'I');
}

/* After an opening '{' or '[' (*pp at it): 1 and *pp at the first item, or 0 and *pp past
 * ``close`` (empty). */
static int first_item(Reader *r, const char **pp, char close) {
    const char *p = ws(*pp + 1, r->end);
    *pp = p < r->end && *p == close ? p + 1 : p;
    return *pp == p;
}

/* After an item: 1 and *pp at the next one (past a ','), 0 and *pp past ``close`` (it was
 * the last), or -1. */
static int next_item(Reader *r, const char **pp, char close) {
    const char *p = ws(*pp, r->end);
    if (p < r->end && (*p == ',' || *p == close)) {
        *pp = *p == ',' ? ws(p + 1, r->end) : p + 1;
        return *p == ',';
    }
    return fail(r, p, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

/* At a member's name: scans it and its ':'; *pp at the value. */
static int member_name(Reader *r, const char **pp, const char **k, Py_ssize_t *kn) {
    const char *p = *pp, *e = r->end;
    if (p >= e || *p != '"') return fail(r, p, "expected a member name");
    if (scan_string(r, &p, k, kn) < 0) return -1;
    p = ws(p, e);
    if (p >= e || *p != ':') return fail(r, p, "expected ':'");
    p = ws(p + 1, e);
    if (p >= e) return fail(r, p, "unexpected end of data");
    *pp = p;
    return 0;
}

static int skip_value(Reader *r, const char **pp, int depth) {
    const char *p = ws(*pp, r->end), *e = r->end, *s;
    Py_ssize_t n;
    int is_int;
    if (p >= e) return fail(r, p, "unexpected end of data");
    switch (*p) {
    case '"':
        if (scan_string(r, &p, &s, &n) < 0) return -1;
        break;
    case '{':
    case '[': {
        if (depth >= MAX_DEPTH) return fail(r, p, "JSON nested too deeply to be a trace");
        int obj = *p == '{';
        char close = obj ? '}' : ']';
        for (int more = first_item(r, &p, close); more; more = next_item(r, &p, close)) {
            if (more < 0 || (obj && member_name(r, &p, &s, &n) < 0)) return -1;
            if (skip_value(r, &p, depth + 1) < 0) return -1;
        }
        break;
    }
    case 't':
    case 'f':
    case 'n':
    case 'N':
    case 'I': {
        const char *word = *p == 't'   ? "true"
                           : *p == 'f' ? "false"
                           : *p == 'n' ? "null"
                           : *p == 'N' ? "NaN"
                                       : "Infinity";
        if (literal(r, &p, word) < 0) return -1;
        break;
    }
    default:
        if (special_number(p, e)) {
            if (literal(r, &p, "-Infinity") < 0) return -1;
        } else if (scan_number(r, &p, &is_int) < 0) {
            return -1;
        }
    }
    *pp = p;
    return 0;
}

/* A string member's code, or -1 (and the value skipped) when it is not a string. */
static int string_field(Reader *r, const char **pp, int32_t *code) {
    const char *s;
    Py_ssize_t n;
    if (**pp != '"') {
        *code = -1;
        return skip_value(r, pp, 1);
    }
    if (scan_string(r, pp, &s, &n) < 0) return -1;
    *code = intern_string(&r->str, r->memo, s, n);
    return *code < 0 ? -1 : 0;
}

/* ``ts`` or ``dur``: ns and its kind. */
static int time_field(Reader *r, const char **pp, int64_t *ns, int8_t *kind) {
    const char *p = *pp;
    int is_int;
    if (*p == '-' || is_digit(*p)) {
        if (!special_number(p, r->end)) {
            if (scan_number(r, pp, &is_int) < 0) return -1;
            *kind = time_ns(p, *pp, is_int, ns) < 0 ? T_BAD : is_int ? T_INT : T_DECIMAL;
            return 0;
        }
    }
    *kind = T_BAD;
    *ns = 0;
    return skip_value(r, pp, 1);
}

/* ``pid`` or ``tid``: an int64, or a string's code (the caller reads its digits). */
static int id_field(Reader *r, const char **pp, int64_t *value, int32_t *code) {
    const char *p = *pp;
    int is_int;
    *value = 0;
    *code = -1;
    if (*p == '"') return string_field(r, pp, code);
    if ((*p == '-' || is_digit(*p)) && !special_number(p, r->end)) {
        if (scan_number(r, pp, &is_int) < 0) return -1;
        if (!is_int || to_int64(p, *pp, value) < 0) *value = 0;
        return 0;
    }
    return skip_value(r, pp, 1);
}

/* One member of ``args``: pushes its row. */
static int arg_value(Reader *r, const char **pp, int64_t event, int32_t key) {
    const char *p = *pp, *s;
    int8_t kind;
    int64_t i = 0;
    double f = NAN;
    int32_t code = -1;
    int is_int;
    if (*p == '"') {
        if (string_field(r, &p, &code) < 0) return -1;
        kind = A_STR;
    } else if ((*p == '-' || is_digit(*p)) && !special_number(p, r->end)) {
        s = p;
        if (scan_number(r, &p, &is_int) < 0) return -1;
        if (is_int && to_int64(s, p, &i) == 0) {
            kind = A_INT;
        } else if (is_int) { /* beyond int64: its text */
            kind = A_JSON;
            if ((code = intern(&r->raw, s, p - s)) < 0) return -1;
        } else {
            kind = A_DOUBLE;
            f = to_double(s, p);
        }
    } else if (*p == 't' || *p == 'f') {
        i = *p == 't';
        if (literal(r, &p, i ? "true" : "false") < 0) return -1;
        kind = A_BOOL;
    } else {
        s = p;
        if (skip_value(r, &p, 2) < 0) return -1;
        kind = A_JSON;
        if ((code = intern(&r->raw, s, p - s)) < 0) return -1;
    }
    *pp = p;
    if (push_i64(&r->ag_event, event) < 0 || push_i32(&r->ag_key, key) < 0 ||
        push_i8(&r->ag_kind, kind) < 0 || push_i64(&r->ag_int, i) < 0 ||
        push_f64(&r->ag_float, f) < 0 || push_i32(&r->ag_code, code) < 0)
        return -1;
    return 0;
}

static void args_truncate(Reader *r, size_t len) {
    r->ag_event.len = r->ag_key.len = r->ag_kind.len = r->ag_int.len = r->ag_float.len =
        r->ag_code.len = len;
}

/* ``args`` (at its '{'): a row per member, in order. A second ``args`` replaces the first (as
 * json.loads keeps the last member of a name). */
static int args_object(Reader *r, const char **pp, int64_t event, size_t mark) {
    const char *p = *pp, *s;
    Py_ssize_t n;
    args_truncate(r, mark);
    for (int more = first_item(r, &p, '}'); more; more = next_item(r, &p, '}')) {
        if (more < 0 || member_name(r, &p, &s, &n) < 0) return -1;
        int32_t key = intern_string(&r->str, r->memo, s, n);
        if (key < 0 || arg_value(r, &p, event, key) < 0) return -1;
    }
    *pp = p;
    return 0;
}

/* ---------------------------------------------------------------- events */

enum { K_OTHER, K_PH, K_NAME, K_CAT, K_TS, K_DUR, K_PID, K_TID, K_ARGS };

static int key_of(const char *k, Py_ssize_t n) {
#define IS(word) (n == (Py_ssize_t)sizeof(word) - 1 && memcmp(k, word, sizeof(word) - 1) == 0)
    if (IS("ph")) return K_PH;
    if (IS("name")) return K_NAME;
    if (IS("cat")) return K_CAT;
    if (IS("ts")) return K_TS;
    if (IS("dur")) return K_DUR;
    if (IS("pid")) return K_PID;
    if (IS("tid")) return K_TID;
    if (IS("args")) return K_ARGS;
#undef IS
    return K_OTHER;
}

static int push_event(Reader *r, int8_t object, int32_t ph, int32_t name, int32_t cat,
                      int64_t ts, int64_t dur, int8_t tk, int8_t dk, int64_t pid, int64_t tid,
                      int32_t pid_str, int32_t tid_str) {
    if (push_i8(&r->ev_object, object) < 0 || push_i32(&r->ev_ph, ph) < 0 ||
        push_i32(&r->ev_name, name) < 0 || push_i32(&r->ev_cat, cat) < 0 ||
        push_i64(&r->ev_ts, ts) < 0 || push_i64(&r->ev_dur, dur) < 0 ||
        push_i8(&r->ev_ts_kind, tk) < 0 || push_i8(&r->ev_dur_kind, dk) < 0 ||
        push_i64(&r->ev_pid, pid) < 0 || push_i64(&r->ev_tid, tid) < 0 ||
        push_i32(&r->ev_pid_str, pid_str) < 0 || push_i32(&r->ev_tid_str, tid_str) < 0)
        return -1;
    return 0;
}

/* One element of traceEvents that is an object (at its '{'). */
static int event(Reader *r, const char **pp, int64_t index) {
    const char *p = *pp, *k;
    Py_ssize_t kn;
    int32_t ph = -1, name = -1, cat = -1, pid_str = -1, tid_str = -1;
    int64_t ts = 0, dur = 0, pid = 0, tid = 0, last;
    int8_t tk = T_MISSING, dk = T_MISSING;
    size_t mark = r->ag_event.len;
    int rc = 0;
    for (int more = first_item(r, &p, '}'); more; more = next_item(r, &p, '}')) {
        if (more < 0 || member_name(r, &p, &k, &kn) < 0) return -1;
        switch (key_of(k, kn)) {
        case K_PH: rc = string_field(r, &p, &ph); break;
        case K_NAME: rc = string_field(r, &p, &name); break;
        case K_CAT: rc = string_field(r, &p, &cat); break;
        case K_TS: rc = time_field(r, &p, &ts, &tk); break;
        case K_DUR: rc = time_field(r, &p, &dur, &dk); break;
        case K_PID: rc = id_field(r, &p, &pid, &pid_str); break;
        case K_TID: rc = id_field(r, &p, &tid, &tid_str); break;
        case K_ARGS:
            if (*p == '{') {
                rc = args_object(r, &p, index, mark);
            } else {
                args_truncate(r, mark);
                rc = skip_value(r, &p, 1);
            }
            break;
        default: rc = skip_value(r, &p, 1);
        }
        if (rc < 0) return -1;
    }
    if ((tk == T_INT || tk == T_DECIMAL) && dk != T_BAD &&
        __builtin_add_overflow(ts, dk == T_MISSING ? 0 : dur, &last))
        tk = T_BAD; /* its end is past int64 ns */
    *pp = p;
    return push_event(r, 1, ph, name, cat, ts, dur, tk, dk, pid, tid, pid_str, tid_str);
}

static int trace_events(Reader *r, const char **pp) {
    const char *p = *pp, *e = r->end;
    int64_t i = 0;
    for (int more = first_item(r, &p, ']'); more; more = next_item(r, &p, ']'), i++) {
        if (more < 0) return -1;
        if (p < e && *p == '{') {
            if (event(r, &p, i) < 0) return -1;
        } else {
            if (skip_value(r, &p, 1) < 0) return -1;
            if (push_event(r, 0, -1, -1, -1, 0, 0, T_MISSING, T_MISSING, 0, 0, -1, -1) < 0)
                return -1;
        }
        if ((int64_t)(r->ev_object.len + r->ag_event.len) > r->max_rows)
            return fail(r, p, "row budget: too many events and args");
        if (p - r->yielded > YIELD_BYTES) { /* let the server's other threads run (/healthz) */
            r->yielded = p;
            Py_BEGIN_ALLOW_THREADS
            Py_END_ALLOW_THREADS
        }
    }
    *pp = p;
    return 0;
}

/* The top-level object: traceEvents read, every other member's value's span listed. */
static int document(Reader *r, PyObject *header, int *found) {
    const char *p = ws(r->base, r->end), *e = r->end, *k;
    Py_ssize_t kn;
    if (p >= e || *p != '{') return fail(r, p, "not a JSON object");
    for (int more = first_item(r, &p, '}'); more; more = next_item(r, &p, '}')) {
        if (more < 0 || member_name(r, &p, &k, &kn) < 0) return -1;
        if (kn == 11 && memcmp(k, "traceEvents", 11) == 0) {
            if ((*found = *p == '[')) {
#define RESET(name, type) r->name.len = 0;
                COLS(RESET)
#undef RESET
                if (trace_events(r, &p) < 0) return -1;
            } else if (skip_value(r, &p, 1) < 0) {
                return -1;
            }
        } else {
            const char *start = p;
            if (skip_value(r, &p, 1) < 0) return -1;
            PyObject *key = decode_json_string(k, kn);
            PyObject *item = key ? Py_BuildValue("(Nnn)", key, (Py_ssize_t)(start - r->base),
                                                 (Py_ssize_t)(p - r->base))
                                 : NULL;
            if (!item || PyList_Append(header, item) < 0) {
                Py_XDECREF(item);
                return -1;
            }
            Py_DECREF(item);
        }
    }
    if (ws(p, e) != e) return fail(r, ws(p, e), "extra data after the JSON object");
    return 0;
}

static int put(PyObject *d, const char *key, PyObject *v) {
    if (!v) return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *read_kineto(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long max_rows;
    if (!PyArg_ParseTuple(args, "y*L", &view, &max_rows)) return NULL;
    Reader r;
    memset(&r, 0, sizeof r);
    r.base = r.yielded = view.buf;
    r.end = r.base + view.len;
    r.max_rows = max_rows;
#define WIDTH(name, type) W(r.name, type);
    COLS(WIDTH)
#undef WIDTH
    PyObject *res = NULL, *out = NULL, *header = NULL;
    int found = 0;
    if (!(r.memo = PyMem_Calloc(MEMO_SLOTS, sizeof(Memo)))) {
        PyErr_NoMemory();
        goto done;
    }
    if (interner_init(&r.str) < 0 || interner_init(&r.raw) < 0) goto done;
    if (!(header = PyList_New(0)) || document(&r, header, &found) < 0) goto done;
    if (!(out = PyDict_New())) goto done;
#define PUT(name, type) if (put(out, #name, col_take(&r.name)) < 0) goto done;
    COLS(PUT)
#undef PUT
    if (PyDict_SetItemString(out, "strings", r.str.list) < 0 ||
        PyDict_SetItemString(out, "raw", r.raw.list) < 0 ||
        PyDict_SetItemString(out, "header", header) < 0 ||
        put(out, "found", PyBool_FromLong(found)) < 0)
        goto done;
    res = out;
    out = NULL;
done:
#define FREE(name, type) col_free(&r.name);
    COLS(FREE)
#undef FREE
    interner_free(&r.str);
    interner_free(&r.raw);
    PyMem_Free(r.memo);
    Py_XDECREF(header);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef methods[] = {
    {"read_kineto", read_kineto, METH_VARARGS,
     "read_kineto(buffer, max_rows) -> dict of column buffers (ev_*: per traceEvents element, "
     "ag_*: per args member), the interned strings and JSON texts, the header's value spans "
     "and whether traceEvents was an array."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_kineto_fast",
                                    "Fast Kineto trace reader (see trace_parsers/kineto.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__kineto_fast(void) {
    hash_key_init();
    return PyModule_Create(&moddef);
}
