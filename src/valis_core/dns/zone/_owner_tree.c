/* A zone's owner tables, compiled (part of valis_core.dns.zone._rows, beside _rows.c):
 *
 * - tree: tree.tree's empty non-terminals, child counts and wildcards of a zone's owners,
 *   in the same order (build._freeze_zone uses it when it is built);
 * - shards: owners.OwnerMap's shards of a dict, each key at hash(key) & (count - 1), in
 *   the dict's order (owners._sharded);
 * - merge_node: records.merge_node, an owner of several records in its final encoding
 *   (build.freeze_node uses it when it is built).
 *
 * tests/property/test_zone_rows.py holds them to the Python ones.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "_owner_tree.h"

static int is_wildcard(const char *name, Py_ssize_t size) {
    return size >= 2 && name[0] == 1 && name[1] == '*';
}

PyObject *rows_tree(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *apex, *nodes;
    if (!PyArg_ParseTuple(args, "O!O!:tree", &PyBytes_Type, &apex, &PyDict_Type, &nodes))
        return NULL;
    PyObject *empty = PySet_New(NULL), *children = PyDict_New();
    if (empty == NULL || children == NULL) goto failed;
    const char *apex_at = PyBytes_AS_STRING(apex);
    Py_ssize_t apex_len = PyBytes_GET_SIZE(apex), wildcards = 0, below_apex = 0;
    Py_ssize_t pos = 0;
    PyObject *owner, *value;
    while (PyDict_Next(nodes, &pos, &owner, &value)) {
        if (!PyBytes_Check(owner)) {
            PyErr_SetString(PyExc_TypeError, "an owner key is bytes");
            goto failed;
        }
        const char *name = PyBytes_AS_STRING(owner);
        Py_ssize_t size = PyBytes_GET_SIZE(owner), at = 0;
        wildcards += is_wildcard(name, size);
        while (!(size - at == apex_len && memcmp(name + at, apex_at, (size_t)apex_len) == 0)) {
            Py_ssize_t up = at + 1 + (unsigned char)name[at];
            if (name[at] == 0 || up >= size) {
                PyErr_SetString(PyExc_ValueError, "an owner is not at or below the apex");
                goto failed;
            }
            if (size - up == apex_len && memcmp(name + up, apex_at, (size_t)apex_len) == 0) {
                if (below_apex++ == 0 && PyDict_SetItem(children, apex, Py_None) < 0)
                    goto failed; /* its place in the order; the count is set at the end */
                break;
            }
            PyObject *parent = PyBytes_FromStringAndSize(name + up, size - up);
            if (parent == NULL) goto failed;
            PyObject *had = PyDict_GetItemWithError(children, parent);
            long long counted = had == NULL ? 0 : PyLong_AsLongLong(had);
            PyObject *now = (had == NULL && PyErr_Occurred()) ? NULL
                                                               : PyLong_FromLongLong(counted + 1);
            int stop = -1;
            if (now != NULL && PyDict_SetItem(children, parent, now) == 0) {
                stop = PyDict_Contains(nodes, parent);
                if (stop == 0) stop = PySet_Contains(empty, parent);
                if (stop == 0) stop = PySet_Add(empty, parent) < 0 ? -1 : 0;
            }
            Py_XDECREF(now);
            Py_DECREF(parent);
            if (stop < 0) goto failed;
            if (stop) break;
            wildcards += is_wildcard(name + up, size - up);
            at = up;
        }
    }
    if (below_apex) {
        PyObject *count = PyLong_FromSsize_t(below_apex);
        int failed = count == NULL || PyDict_SetItem(children, apex, count) < 0;
        Py_XDECREF(count);
        if (failed) goto failed;
    }
    return Py_BuildValue("NNn", empty, children, wildcards);
failed:
    Py_XDECREF(empty);
    Py_XDECREF(children);
    return NULL;
}

PyObject *rows_shards(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *items;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "O!n:shards", &PyDict_Type, &items, &count)) return NULL;
    if (count < 1 || (count & (count - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "shards are a power of two");
        return NULL;
    }
    PyObject *shards = PyTuple_New(count);
    if (shards == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *shard = PyDict_New();
        if (shard == NULL) goto failed;
        PyTuple_SET_ITEM(shards, i, shard);
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(items, &pos, &key, &value)) {
        Py_hash_t hash = PyObject_Hash(key);
        if (hash == -1) goto failed;
        PyObject *shard = PyTuple_GET_ITEM(shards, (Py_ssize_t)((Py_uhash_t)hash & (Py_uhash_t)(count - 1)));
        if (PyDict_SetItem(shard, key, value) < 0) goto failed;
    }
    return shards;
failed:
    Py_DECREF(shards);
    return NULL;
}

/* One record of an owner being merged: where it stands in the blob and in the order. */
typedef struct {
    unsigned rtype;
    unsigned long ttl;
    Py_ssize_t at, size, seen; /* rdata offset and length; its place among the records */
} Held;

static const unsigned char *merged_blob; /* the blob qsort's comparisons read (GIL held) */

/* By type, then rdata, then place: equal records end up side by side, first one first. */
static int by_content(const void *a, const void *b) {
    const Held *x = a, *y = b;
    if (x->rtype != y->rtype) return x->rtype < y->rtype ? -1 : 1;
    Py_ssize_t common = x->size < y->size ? x->size : y->size;
    int order = memcmp(merged_blob + x->at, merged_blob + y->at, (size_t)common);
    if (order != 0) return order;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    return x->seen < y->seen ? -1 : (x->seen > y->seen);
}

/* By type, then place: the order merge_node writes the kept records in. */
static int by_place(const void *a, const void *b) {
    const Held *x = a, *y = b;
    if (x->rtype != y->rtype) return x->rtype < y->rtype ? -1 : 1;
    return x->seen < y->seen ? -1 : (x->seen > y->seen);
}

/* merge_node(blob): records.merge_node's (encoding, records per type), O(n log n) in an
 * owner's records however many share a type. */
PyObject *rows_merge_node(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *blob = view.buf;
    Py_ssize_t size = view.len, count = 0;
    PyObject *out = NULL, *counts = NULL;
    for (Py_ssize_t i = 0; i < size; count++) {
        if (size - i < 10) goto truncated;
        i += 10 + ((Py_ssize_t)blob[i + 8] << 8 | blob[i + 9]);
        if (i > size) goto truncated;
    }
    Held *held = PyMem_Malloc(sizeof(Held) * (size_t)(count ? count : 1));
    if (held == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0, n = 0; i < size; n++) {
        const unsigned char *head = blob + i;
        held[n].rtype = (unsigned)head[0] << 8 | head[1];
        held[n].ttl = (unsigned long)head[4] << 24 | (unsigned long)head[5] << 16 |
                      (unsigned long)head[6] << 8 | head[7];
        held[n].size = (Py_ssize_t)head[8] << 8 | head[9];
        held[n].at = i + 10;
        held[n].seen = n;
        i += 10 + held[n].size;
    }
    merged_blob = blob;
    qsort(held, (size_t)count, sizeof(Held), by_content);
    /* Drop each record equal to the one before it (the first stated stays), and give
     * every record its type's lowest TTL over all stated, duplicates too (RFC 2181
     * section 5.2). */
    Py_ssize_t kept = 0, length = 0;
    for (Py_ssize_t start = 0, end; start < count; start = end) {
        unsigned long lowest = held[start].ttl;
        for (end = start + 1; end < count && held[end].rtype == held[start].rtype; end++)
            if (held[end].ttl < lowest) lowest = held[end].ttl;
        for (Py_ssize_t n = start; n < end; n++) {
            held[n].ttl = lowest;
            if (n > start && held[n].size == held[n - 1].size &&
                memcmp(blob + held[n].at, blob + held[n - 1].at, (size_t)held[n].size) == 0)
                continue;
            held[kept++] = held[n]; /* kept <= n: nothing unread is overwritten */
            length += 10 + held[n].size;
        }
    }
    qsort(held, (size_t)kept, sizeof(Held), by_place);
    out = PyBytes_FromStringAndSize(NULL, length);
    counts = PyDict_New();
    if (out == NULL || counts == NULL) goto failed;
    unsigned char *to = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t n = 0, start = 0; n < kept; n++) {
        const Held *record = &held[n];
        unsigned char head[10] = {
            (unsigned char)(record->rtype >> 8), (unsigned char)record->rtype, 0, 1,
            (unsigned char)(record->ttl >> 24), (unsigned char)(record->ttl >> 16),
            (unsigned char)(record->ttl >> 8), (unsigned char)record->ttl,
            (unsigned char)(record->size >> 8), (unsigned char)record->size};
        memcpy(to, head, 10);
        memcpy(to + 10, blob + record->at, (size_t)record->size);
        to += 10 + record->size;
        if (n + 1 == kept || held[n + 1].rtype != record->rtype) {
            PyObject *rtype = PyLong_FromUnsignedLong(record->rtype);
            PyObject *number = PyLong_FromSsize_t(n + 1 - start);
            int failed = rtype == NULL || number == NULL ||
                         PyDict_SetItem(counts, rtype, number) < 0;
            Py_XDECREF(rtype);
            Py_XDECREF(number);
            if (failed) goto failed;
            start = n + 1;
        }
    }
    PyMem_Free(held);
    PyBuffer_Release(&view);
    PyObject *result = PyTuple_Pack(2, out, counts);
    Py_DECREF(out);
    Py_DECREF(counts);
    return result;
failed:
    Py_XDECREF(out);
    Py_XDECREF(counts);
    PyMem_Free(held);
    PyBuffer_Release(&view);
    return NULL;
truncated:
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "an owner's records run past the end of its encoding");
    return NULL;
}
