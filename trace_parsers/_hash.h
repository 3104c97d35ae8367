/* Hashes of the C readers' open-addressing tables, keyed per process: a trace crafted so that
 * its thread ids, metadata ids or names collide in a fixed public hash (FNV-1a, a golden-ratio
 * multiply) made every insert probe the whole cluster, quadratic in the input (160 k colliding
 * tids: 29 s). Strings use CPython's own keyed hash (SipHash-1-3 with the interpreter's random
 * secret); integers are XORed with a key drawn from it, then put through splitmix64's finalizer.
 * With PYTHONHASHSEED=0 the key is fixed, as Python's own dict hashing then is. */
#ifndef PODSCOPE_HASH_H
#define PODSCOPE_HASH_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX >= 0x030E0000 /* 3.14: public */
#define PODSCOPE_HASH_BUFFER(p, n) Py_HashBuffer((p), (n))
#else
#if PY_VERSION_HEX >= 0x030D0000 /* 3.13: still exported, but declared in an internal header */
PyAPI_FUNC(Py_hash_t) _Py_HashBytes(const void *, Py_ssize_t);
#endif
#define PODSCOPE_HASH_BUFFER(p, n) _Py_HashBytes((p), (n))
#endif

static uint64_t podscope_hash_key;

/* Call once from the module's init function (the GIL is held there). */
static void hash_key_init(void) {
    static const char tag[] = "podscope table key";
    podscope_hash_key = (uint64_t)PODSCOPE_HASH_BUFFER(tag, (Py_ssize_t)(sizeof tag - 1));
}

static inline uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t hash_u64(uint64_t x) { return mix64(x ^ podscope_hash_key); }

static inline uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    return (uint64_t)PODSCOPE_HASH_BUFFER(p, n);
}

#endif
