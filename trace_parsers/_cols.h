/* Growable fixed-width columns and a string interner shared by the C readers (_xplane_fast.c,
 * _ftrace_fast.c, _kineto_fast.c). Each column is a bytearray grown in place and handed to
 * Python as is (numpy wraps it, no copy). */
#ifndef PODSCOPE_COLS_H
#define PODSCOPE_COLS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "_hash.h"

/* Asks for transparent huge pages on a large buffer's whole pages (as numpy does for its arrays
 * of 4 MiB and more): a 2 MiB page is one fault where 4 KiB pages are 512, and faults, not
 * decoding, were a third of a parse's time on a virtual machine. Advice only: ignored where
 * the kernel has no THP or it is off, and not given when NUMPY_MADVISE_HUGEPAGE=0 (the switch
 * numpy reads, for steady times where the kernel compacts memory to find huge pages). */
static void advise_huge(char *data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    static int off = -1;
    if (off < 0) {
        const char *v = getenv("NUMPY_MADVISE_HUGEPAGE");
        off = v != NULL && v[0] == '0';
    }
    if (off || bytes < ((size_t)4 << 20)) return;
    uintptr_t page = 4096, start = ((uintptr_t)data + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)data + bytes) & ~(page - 1);
    if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)data;
    (void)bytes;
#endif
}

typedef struct {
    PyObject *buf; /* bytearray that holds the column: grown in place, handed to Python as is */
    char *data;
    size_t len;    /* elements */
    size_t cap;
    size_t width;
} Col;

static int col_reserve(Col *c, size_t need) {
    if (need <= c->cap) return 0;
    size_t cap = c->cap ? c->cap : 4096;
    while (cap < need) cap *= 2;
    if (!c->buf && !(c->buf = PyByteArray_FromStringAndSize(NULL, 0))) return -1;
    /* Large bytearrays live in mmap'd memory: growing them remaps pages instead of copying. */
    if (PyByteArray_Resize(c->buf, (Py_ssize_t)(cap * c->width)) < 0) return -1;
    c->data = PyByteArray_AS_STRING(c->buf);
    c->cap = cap;
    advise_huge(c->data, cap * c->width);
    return 0;
}

static inline int col_push(Col *c, const void *v) {
    if (c->len == c->cap && col_reserve(c, c->len + 1) < 0) return -1;
    memcpy(c->data + c->len * c->width, v, c->width);
    c->len++;
    return 0;
}

/* Typed pushes for the per-event and per-stat columns: one store instead of a memcpy call. */
#define DEFINE_PUSH(name, type)                                                   \
    static inline int name(Col *c, type v) {                                      \
        if (c->len == c->cap && col_reserve(c, c->len + 1) < 0) return -1;        \
        ((type *)c->data)[c->len++] = v;                                          \
        return 0;                                                                 \
    }
DEFINE_PUSH(push_i64, int64_t)
DEFINE_PUSH(push_i32, int32_t)
DEFINE_PUSH(push_i8, int8_t)
DEFINE_PUSH(push_f64, double)

static void col_free(Col *c) {
    Py_CLEAR(c->buf);
    c->data = NULL;
    c->len = c->cap = 0;
}

static PyObject *col_take(Col *c) { /* -> bytearray of exactly len elements; the column is reset */
    if (!c->buf && !(c->buf = PyByteArray_FromStringAndSize(NULL, 0))) return NULL;
    if (PyByteArray_Resize(c->buf, (Py_ssize_t)(c->len * c->width)) < 0) return NULL;
    PyObject *b = c->buf;
    c->buf = NULL;
    col_free(c);
    return b;
}

#define W(c, t) ((c).width = sizeof(t))

/* ---------------------------------------------------------------- string interning */

typedef struct {
    const char *p; /* into the input buffer, which outlives the interner */
    Py_ssize_t n;
    uint64_t h;
    int32_t idx; /* -1: empty slot */
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, len;
    PyObject *list; /* list[str], index = code */
} Interner;

static int interner_grow(Interner *t) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    Slot *slots = PyMem_Malloc(cap * sizeof(Slot));
    if (!slots) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < cap; i++) slots[i].idx = -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].idx < 0) continue;
        size_t j = t->slots[i].h & (cap - 1);
        while (slots[j].idx >= 0) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* Makes the Python string of bytes [p, p+n) the first time they are interned. */
typedef PyObject *(*Decoder)(const char *p, Py_ssize_t n);

static PyObject *decode_utf8(const char *p, Py_ssize_t n) {
    return PyUnicode_DecodeUTF8(p, n, "replace");
}

/* The code of bytes [p, p+n), adding ``decode(p, n)`` if new. The bytes must outlive the
 * interner (they are the caller's input buffer). */
static int32_t intern_as(Interner *t, const char *p, Py_ssize_t n, Decoder decode) {
    uint64_t h = hash_bytes(p, n);
    size_t j = h & (t->cap - 1);
    while (t->slots[j].idx >= 0) {
        Slot *s = &t->slots[j];
        if (s->h == h && s->n == n && memcmp(s->p, p, (size_t)n) == 0) return s->idx;
        j = (j + 1) & (t->cap - 1);
    }
    PyObject *str = decode(p, n);
    if (!str) return -1;
    int rc = PyList_Append(t->list, str);
    Py_DECREF(str);
    if (rc < 0) return -1;
    int32_t idx = (int32_t)t->len++;
    t->slots[j] = (Slot){p, n, h, idx};
    if (t->len * 2 > t->cap && interner_grow(t) < 0) return -1;
    return idx;
}

/* The code of bytes [p, p+n) as UTF-8 text (invalid bytes replaced). */
static int32_t intern(Interner *t, const char *p, Py_ssize_t n) {
    return intern_as(t, p, n, decode_utf8);
}

static int interner_init(Interner *t) {
    memset(t, 0, sizeof(*t));
    if (!(t->list = PyList_New(0))) return -1;
    return interner_grow(t);
}

static void interner_free(Interner *t) {
    PyMem_Free(t->slots);
    t->slots = NULL;
    Py_CLEAR(t->list);
}

#endif
