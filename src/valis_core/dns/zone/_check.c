/* The compiled run of `valis zone check`'s loop over records (valis_core.dns.zone._check).
 *
 * first_records takes, from an index on, each record that is the first of its owner and
 * that the check's Python loop (zone/check.py) would add with Builder.add_wire and note
 * without a finding, and does exactly what that loop does with it: the owner's first
 * record into the zone's owner table (noted if NS, SOA or DNAME), its index as the
 * owner's first. It stops at any other record (an owner's second record, a type not yet
 * found servable, data outside the zone, a TTL or rdata out of range, an owner or a
 * target name that may look written without its trailing dot), and the Python loop takes
 * that one: the Python loop stays the reference (tests/property/test_master_compiled.py
 * checks a file the same with and without this run, findings and their order included).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_TTL 2147483647LL
#define MAX_RDATA 65535
#define MAX_NAME 255

enum { T_NS = 2, T_CNAME = 5, T_SOA = 6, T_PTR = 12, T_MX = 15, T_SRV = 33, T_DNAME = 39 };

/* check._NAME_AT: where a name stands in the rdata of the types that hold one; -1. */
static Py_ssize_t name_at(long rtype) {
    switch (rtype) {
    case T_NS:
    case T_CNAME:
    case T_PTR:
    case T_DNAME:
        return 0;
    case T_MX:
        return 2;
    case T_SRV:
        return 6;
    }
    return -1;
}

/* names.is_at_or_below: `name` equals `apex` or lies beneath it, by whole labels. */
static int at_or_below(const unsigned char *name, Py_ssize_t len, const unsigned char *apex,
                       Py_ssize_t apex_len) {
    Py_ssize_t cut = len - apex_len;
    if (cut < 0 || memcmp(name + cut, apex, (size_t)apex_len) != 0) return 0;
    Py_ssize_t i = 0;
    while (i < cut) i += name[i] + 1;
    return i == cut;
}

/* check._looks_undotted of a lowercased name: 1, 0, or -1 for a name this does not judge
 * (it ends with the apex's octets but not by whole labels, or its last relative label is
 * not plain ASCII or is one of check._TLDS: the Python loop then judges it). */
static int looks_undotted(const unsigned char *name, Py_ssize_t len, const unsigned char *apex,
                          Py_ssize_t apex_len, PyObject *tlds) {
    if (apex_len == 1 || len <= apex_len) return 0;
    if (memcmp(name + len - apex_len, apex, (size_t)apex_len) != 0) return 0;
    if (!at_or_below(name, len, apex, apex_len)) return -1; /* ends so, but not by labels */
    Py_ssize_t relative = len - apex_len;
    Py_ssize_t origin = apex_len - 1; /* the apex without its root label */
    if (relative >= origin && memcmp(name + relative - origin, apex, (size_t)origin) == 0)
        return 1; /* the origin written twice */
    if (name[0] + 1 == relative) return 0; /* one label: an ordinary relative name */
    Py_ssize_t last = 0;
    for (Py_ssize_t i = 0; i < relative; i += name[i] + 1) last = i;
    const unsigned char *label = name + last + 1;
    Py_ssize_t size = name[last];
    for (Py_ssize_t i = 0; i < size; i++)
        if (label[i] > 0x7e) return -1;
    PyObject *text = PyUnicode_DecodeASCII((const char *)label, size, NULL);
    if (text == NULL) {
        PyErr_Clear();
        return -1;
    }
    int found = PySet_Contains(tlds, text);
    Py_DECREF(text);
    if (found < 0) PyErr_Clear();
    return found == 0 ? 0 : -1;
}

/* first_records(records, start, apex, nodes, notable, servable, first, tlds): take
 * records[start:] while each is an owner's first that the check's loop notes without a
 * finding, as that loop does (owner tables `nodes` and `notable` of Builder's zone at
 * `apex`, `first` the check's owner -> index); return the index of the first record not
 * taken. `servable`: the types add_wire has found servable; `tlds`: check._TLDS. */
static PyObject *check_first_records(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *records, *servable, *nodes, *notable, *first, *tlds;
    Py_ssize_t start, apex_len;
    const unsigned char *apex;
    if (!PyArg_ParseTuple(args, "O!ny#O!O!O!O!O!", &PyList_Type, &records, &start, &apex,
                          &apex_len, &PyDict_Type, &nodes, &PySet_Type, &notable, &PySet_Type,
                          &servable, &PyDict_Type, &first, &PyFrozenSet_Type, &tlds))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(records);
    Py_ssize_t short_below = apex_len - 1;
    Py_ssize_t index = start < 0 ? 0 : start;
    for (; index < count; index++) {
        PyObject *record = PyList_GET_ITEM(records, index);
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 4) break;
        PyObject *owner = PyTuple_GET_ITEM(record, 0), *rtype_obj = PyTuple_GET_ITEM(record, 1);
        PyObject *ttl_obj = PyTuple_GET_ITEM(record, 2), *rdata = PyTuple_GET_ITEM(record, 3);
        if (!PyBytes_Check(owner) || !PyBytes_Check(rdata) || !PyLong_Check(rtype_obj) ||
            !PyLong_Check(ttl_obj))
            break;
        int found = PySet_Contains(servable, rtype_obj);
        if (found < 0) return NULL;
        if (!found) break;
        long rtype = PyLong_AsLong(rtype_obj);
        long long ttl = PyLong_AsLongLong(ttl_obj);
        if (PyErr_Occurred()) return NULL;
        Py_ssize_t len = PyBytes_GET_SIZE(owner), size = PyBytes_GET_SIZE(rdata);
        if (rtype < 0 || rtype > 0xFFFF || ttl < 0 || ttl > MAX_TTL || size > MAX_RDATA ||
            len > MAX_NAME)
            break;
        unsigned char key[MAX_NAME];
        const unsigned char *written = (const unsigned char *)PyBytes_AS_STRING(owner);
        for (Py_ssize_t i = 0; i < len; i++)
            key[i] = written[i] >= 'A' && written[i] <= 'Z' ? written[i] | 0x20 : written[i];
        if (!at_or_below(key, len, apex, apex_len)) break;
        /* check_zone_text: an owner one label below the apex looks undotted only when
         * that label is longer than the apex (its labels written twice). */
        Py_ssize_t below = len - apex_len;
        if ((below != key[0] + 1 || below >= short_below) &&
            looks_undotted(key, len, apex, apex_len, tlds) != 0)
            break;
        Py_ssize_t at = name_at(rtype);
        if (at >= 0) { /* check._target, lowercased, never looking undotted */
            const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(rdata);
            unsigned char target[MAX_NAME];
            Py_ssize_t i = at, n = 0;
            while (i < size && data[i] && n + data[i] + 1 < MAX_NAME && i + data[i] < size) {
                for (Py_ssize_t j = i; j <= i + data[i]; j++, n++)
                    target[n] = data[j] >= 'A' && data[j] <= 'Z' ? data[j] | 0x20 : data[j];
                i += data[i] + 1;
            }
            if (i >= size || data[i]) break; /* no whole name there: the Python loop's */
            target[n++] = 0;
            if (looks_undotted(target, n, apex, apex_len, tlds) != 0) break;
        }
        PyObject *owner_key = PyBytes_FromStringAndSize((const char *)key, len);
        if (owner_key == NULL) return NULL;
        found = PyDict_Contains(nodes, owner_key);
        if (found == 0) found = PyDict_Contains(first, owner_key);
        if (found != 0) { /* an owner seen before: the Python loop notes it again */
            Py_DECREF(owner_key);
            if (found < 0) return NULL;
            break;
        }
        /* Builder._put: the RR_HEAD (type, class IN, TTL, length) and the rdata. */
        PyObject *held = PyBytes_FromStringAndSize(NULL, 10 + size);
        PyObject *position = PyLong_FromSsize_t(index);
        int failed = held == NULL || position == NULL;
        if (!failed) {
            unsigned char *out = (unsigned char *)PyBytes_AS_STRING(held);
            unsigned long long t = (unsigned long long)ttl;
            unsigned char head[10] = {
                (unsigned char)(rtype >> 8), (unsigned char)rtype, 0, 1,
                (unsigned char)(t >> 24), (unsigned char)(t >> 16), (unsigned char)(t >> 8),
                (unsigned char)t, (unsigned char)(size >> 8), (unsigned char)size};
            memcpy(out, head, 10);
            memcpy(out + 10, PyBytes_AS_STRING(rdata), (size_t)size);
            failed = PyDict_SetItem(nodes, owner_key, held) < 0 ||
                     ((rtype == T_NS || rtype == T_SOA || rtype == T_DNAME) &&
                      PySet_Add(notable, owner_key) < 0) ||
                     PyDict_SetItem(first, owner_key, position) < 0;
        }
        Py_XDECREF(held);
        Py_XDECREF(position);
        Py_DECREF(owner_key);
        if (failed) return NULL;
    }
    return PyLong_FromSsize_t(index);
}

static PyMethodDef check_methods[] = {
    {"first_records", check_first_records, METH_VARARGS,
     "first_records(records, start, apex, nodes, notable, servable, first, tlds)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef check_module = {
    PyModuleDef_HEAD_INIT, "_check", "The compiled run of the zone check's loop over records.",
    -1, check_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__check(void) { return PyModule_Create(&check_module); }
