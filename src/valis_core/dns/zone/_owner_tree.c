/* A zone's owner tables, compiled (part of valis_core.dns.zone._rows, beside _rows.c):
 *
 * - tree: tree.tree's empty non-terminals, child counts and wildcards of a zone's owners,
 *   in the same order (build._freeze_zone uses it when it is built);
 * - shards: owners.OwnerMap's shards of a dict, each key at hash(key) & (count - 1), in
 *   the dict's order (owners._sharded).
 *
 * tests/property/test_zone_rows.py holds both to the Python ones.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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
