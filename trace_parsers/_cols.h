/* Growable fixed-width columns shared by the C readers (_xplane_fast.c, _ftrace_fast.c): each
 * column is a bytearray grown in place and handed to Python as is (numpy wraps it, no copy). */
#ifndef PODSCOPE_COLS_H
#define PODSCOPE_COLS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

#endif
