/* The compiled row reader (valis_core.dns.zone._rows): see rows.py for the why.
 *
 * - Loader: the zones of one bulk load. It takes lines of PostgreSQL's COPY text format
 *   (`zone \t owner \t rtype \t ttl \t rdata \n`, or without the zone for a load of one
 *   zone), either handed in one at a time (`line`) or read straight from libpq (`read`: PQgetCopyData on the connection psycopg holds,
 *   through the libpq psycopg loaded, found by `use_libpq`), and adds each row that
 *   Builder.add_fields would take its short way into the zone's parts (`arm`: the
 *   dicts and set of build._ZoneParts), exactly as add_fields does: the owner's key,
 *   the record (RR_HEAD and rdata), nodes.setdefault, more and notable as
 *   _ZoneParts.put keeps them. A line it does not take (anything but printable ASCII,
 *   a backslash, not five fields, a zone not armed, an owner, type, TTL or rdata the
 *   short way does not read) is handed back, and Python adds it as it adds every row:
 *   the Python path stays the reference (tests/property/test_zone_rows.py).
 * - tree, shards and merge_node, a zone's owner tables: _owner_tree.c.
 *
 * Everything is done with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "../_spans.h"
#include "_owner_tree.h"

#define MAX_TTL 2147483647L
#define HEAD 10 /* records.RR_HEAD: type, class, TTL, rdata length */
#define CLASS_IN 1
#define T_A 1
#define T_NS 2
#define T_CNAME 5
#define T_SOA 6
#define T_PTR 12
#define T_MX 15
#define T_SRV 33
#define FIELDS 5
#define MAX_TOKENS 8
#define RDATA_MAX (2 * (MAX_NAME + 1) + 20)

/* read's outcomes: rows.py's WAIT, LINE, BUDGET, DONE, FAILED. */
enum { R_WAIT = 0, R_LINE = 1, R_BUDGET = 2, R_DONE = 3, R_FAILED = 4 };

typedef int (*get_copy_data_fn)(void *conn, char **buffer, int async);
typedef void (*freemem_fn)(void *ptr);
typedef int (*lib_version_fn)(void);
static get_copy_data_fn pq_get_copy_data;
static freemem_fn pq_freemem;

typedef struct {
    PyObject *apex;    /* bytes, or NULL while the zone is not armed */
    PyObject *nodes;   /* dict: each owner's first record */
    PyObject *more;    /* dict: owner -> bytearray of its records, when more than one */
    PyObject *notable; /* set */
    char suffix[MAX_NAME + 2]; /* "." + origin, lowercase */
    Py_ssize_t suffix_len;
    int refused;
} Zone;

typedef struct {
    PyObject_HEAD
    PyObject *positions; /* dict: the zone column's bytes -> position */
    Zone *zones;
    Py_ssize_t count;
    int zone_column;     /* whether a line starts with its zone (else: the one zone's) */
    Py_ssize_t last;     /* the position of the last line's zone, or -1 */
    PyObject *last_key;  /* its bytes */
} Loader;

/* -- reading one line ------------------------------------------------------------------ */

static int rtype_code(Span s) {
    /* The mnemonics add_fields reads the short way, in any case, as dnspython does (they
     * are letters only, and `| 0x20` equals a lowercase letter for that letter alone, in
     * either case). */
    static const struct { const char *name; int code; } known[] = {
        {"a", T_A}, {"ns", T_NS}, {"cname", T_CNAME}, {"soa", T_SOA},
        {"ptr", T_PTR}, {"mx", T_MX}, {"srv", T_SRV}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (same(s, known[i].name)) return known[i].code;
    return 0;
}

/* master._name without an origin: an absolute name token, or -1. */
static Py_ssize_t rdata_name(Span s, char *out, Py_ssize_t room) {
    if (s.len == 0 || s.at[s.len - 1] != '.') return -1;
    if (s.len == 1) {
        if (room < 1) return -1;
        out[0] = 0;
        return 1;
    }
    Span inner = {s.at, s.len - 1};
    Py_ssize_t n = labels(inner, out, room, 0);
    if (n < 0 || n >= MAX_NAME || n + 1 > room) return -1;
    out[n] = 0;
    return n + 1;
}

static void put16(char *out, unsigned value) { out[0] = (char)(value >> 8); out[1] = (char)value; }

static void put32(char *out, unsigned long value) {
    put16(out, (unsigned)(value >> 16) & 0xFFFF);
    put16(out + 2, (unsigned)value & 0xFFFF);
}

/* What master._ROW_DOUBTFUL lets through: printable ASCII and tabs but for quotes,
 * parentheses, semicolons and backslashes. */
static int row_plain(unsigned char c) {
    if (c == '\t') return 1;
    if (c < 0x20 || c > 0x7e) return 0;
    return c != '"' && c != '(' && c != ')' && c != ';' && c != '\\';
}

/* master.row_rdata for the types other than A: into `out`, its length or -1. */
static Py_ssize_t rdata(int code, Span s, char *out) {
    Span tokens[MAX_TOKENS];
    int count = 0;
    for (Py_ssize_t i = 0; i < s.len; i++)
        if (!row_plain((unsigned char)s.at[i])) return -1;
    for (Py_ssize_t i = 0; i < s.len;) {
        if (s.at[i] == ' ' || s.at[i] == '\t') { i++; continue; }
        Py_ssize_t start = i;
        while (i < s.len && s.at[i] != ' ' && s.at[i] != '\t') i++;
        if (count == MAX_TOKENS) return -1;
        tokens[count++] = (Span){s.at + start, i - start};
    }
    Py_ssize_t n, m;
    long long v[5];
    switch (code) {
    case T_NS: case T_CNAME: case T_PTR:
        return count == 1 ? rdata_name(tokens[0], out, RDATA_MAX) : -1;
    case T_MX:
        if (count != 2 || (v[0] = number(tokens[0], 0xFFFF)) < 0) return -1;
        if ((n = rdata_name(tokens[1], out + 2, RDATA_MAX - 2)) < 0) return -1;
        put16(out, (unsigned)v[0]);
        return 2 + n;
    case T_SOA:
        if (count != 7 || (n = rdata_name(tokens[0], out, RDATA_MAX)) < 0) return -1;
        if ((m = rdata_name(tokens[1], out + n, RDATA_MAX - n)) < 0) return -1;
        for (int i = 0; i < 5; i++) {
            if ((v[i] = number(tokens[2 + i], 0xFFFFFFFFLL)) < 0) return -1;
            put32(out + n + m + 4 * i, (unsigned long)v[i]);
        }
        return n + m + 20;
    case T_SRV:
        if (count != 4) return -1;
        for (int i = 0; i < 3; i++)
            if ((v[i] = number(tokens[i], 0xFFFF)) < 0) return -1;
        if ((n = rdata_name(tokens[3], out + 6, RDATA_MAX - 6)) < 0) return -1;
        for (int i = 0; i < 3; i++) put16(out + 2 * i, (unsigned)v[i]);
        return 6 + n;
    default:
        return -1;
    }
}

/* The zone of a line's first field: its position, -1 if it is none of the load's, -2
 * on an error. */
static Py_ssize_t zone_of(Loader *self, Span s) {
    if (self->last >= 0 && PyBytes_GET_SIZE(self->last_key) == s.len
        && memcmp(PyBytes_AS_STRING(self->last_key), s.at, (size_t)s.len) == 0)
        return self->last;
    PyObject *key = PyBytes_FromStringAndSize(s.at, s.len);
    if (key == NULL) return -2;
    PyObject *found = PyDict_GetItemWithError(self->positions, key);
    if (found == NULL) {
        Py_DECREF(key);
        return PyErr_Occurred() ? -2 : -1;
    }
    Py_ssize_t position = PyLong_AsSsize_t(found);
    if (position < 0 || position >= self->count) {
        Py_DECREF(key);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a zone's position is 0 to n - 1");
        return -2;
    }
    Py_XSETREF(self->last_key, key);
    self->last = position;
    return position;
}

/* Keep one record as _ZoneParts.put does; 0, or -1 on an error. */
static int keep(Zone *zone, PyObject *key, int code, PyObject *record) {
    PyObject *held = PyDict_SetDefault(zone->nodes, key, record);
    if (held == NULL) return -1;
    if (held == record)
        return code == T_NS || code == T_SOA ? PySet_Add(zone->notable, key) : 0;
    PyObject *more = PyDict_GetItemWithError(zone->more, key);
    if (more == NULL) {
        if (PyErr_Occurred()) return -1;
        PyObject *joined = PyByteArray_FromObject(held);
        if (joined == NULL) return -1;
        PyObject *sum = PySequence_InPlaceConcat(joined, record);
        Py_DECREF(joined);
        if (sum == NULL) return -1;
        int failed = PyDict_SetItem(zone->more, key, sum);
        Py_DECREF(sum);
        return failed ? -1 : PySet_Add(zone->notable, key);
    }
    if (!PyByteArray_Check(more)) {
        PyErr_SetString(PyExc_TypeError, "a zone's `more` holds a value that is not a bytearray");
        return -1;
    }
    Py_ssize_t had = PyByteArray_GET_SIZE(more), size = PyBytes_GET_SIZE(record);
    if (PyByteArray_Resize(more, had + size) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(more) + had, PyBytes_AS_STRING(record), (size_t)size);
    return 0;
}

/* One COPY line (its final newline included): 1 taken (or skipped: its zone is refused),
 * 0 handed back to Python, -1 on an error. */
static int take(Loader *self, const char *line, Py_ssize_t size) {
    if (self->zones == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Loader not initialised takes no line");
        return -1;
    }
    if (size < 1 || line[size - 1] != '\n') return 0;
    Span field[FIELDS];
    int count = self->zone_column ? 0 : 1; /* without it, the fields from the owner on */
    Py_ssize_t start = 0, end = size - 1;
    for (Py_ssize_t i = 0; i < end; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c >= 0x80 || c == '\\' || c == '\n') return 0;
        if (c == '\t') {
            if (count == FIELDS - 1) return 0;
            field[count++] = (Span){line + start, i - start};
            start = i + 1;
        }
    }
    if (count != FIELDS - 1) return 0;
    field[count] = (Span){line + start, end - start};
    Py_ssize_t position = self->zone_column ? zone_of(self, field[0]) : 0;
    if (position < 0) return position == -1 ? 0 : -1;
    Zone *zone = &self->zones[position];
    if (zone->refused) return 1;
    if (zone->apex == NULL) return 0;

    /* the owner: printable ASCII, its labels followed by the apex's */
    Span owner = field[1];
    for (Py_ssize_t i = 0; i < owner.len; i++)
        if (owner.at[i] < 0x20 || owner.at[i] > 0x7e) return 0;
    Py_ssize_t tail = zone->suffix_len;
    PyObject *key;
    Py_ssize_t apex_len = PyBytes_GET_SIZE(zone->apex);
    int below = owner.len > tail;
    for (Py_ssize_t i = 0; below && i < tail; i++) {
        char c = owner.at[owner.len - tail + i];
        if ((c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c) != zone->suffix[i]) below = 0;
    }
    if (below) {
        char wire[MAX_NAME + 1];
        Span prefix = {owner.at, owner.len - tail};
        Py_ssize_t n = labels(prefix, wire, MAX_NAME + 1, 1);
        if (n < 0 || n + apex_len > MAX_NAME) return 0;
        key = PyBytes_FromStringAndSize(NULL, n + apex_len);
        if (key == NULL) return -1;
        memcpy(PyBytes_AS_STRING(key), wire, (size_t)n);
        memcpy(PyBytes_AS_STRING(key) + n, PyBytes_AS_STRING(zone->apex), (size_t)apex_len);
    } else {
        if (owner.len != tail - 1) return 0;
        for (Py_ssize_t i = 0; i < owner.len; i++) {
            char c = owner.at[i];
            if ((c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c) != zone->suffix[i + 1]) return 0;
        }
        key = Py_NewRef(zone->apex);
    }

    int code = rtype_code(field[2]);
    long long ttl = number(field[3], MAX_TTL);
    char data[RDATA_MAX];
    Py_ssize_t length = -1;
    if (code && ttl >= 0)
        length = code == T_A ? ipv4(field[4], data) : rdata(code, field[4], data);
    if (length < 0) {
        Py_DECREF(key);
        return 0;
    }
    PyObject *record = PyBytes_FromStringAndSize(NULL, HEAD + length);
    if (record == NULL) {
        Py_DECREF(key);
        return -1;
    }
    char *out = PyBytes_AS_STRING(record);
    put16(out, (unsigned)code);
    put16(out + 2, CLASS_IN);
    put32(out + 4, (unsigned long)ttl);
    put16(out + 8, (unsigned)length);
    memcpy(out + HEAD, data, (size_t)length);
    int failed = keep(zone, key, code, record);
    Py_DECREF(key);
    Py_DECREF(record);
    return failed ? -1 : 1;
}

/* -- the Loader type -------------------------------------------------------------------- */

static int Loader_init(Loader *self, PyObject *args, PyObject *kwds) {
    PyObject *positions;
    int zone_column = 1;
    static char *names[] = {"zones", "zone_column", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|p:Loader", names, &PyDict_Type, &positions,
                                     &zone_column))
        return -1;
    if (!zone_column && PyDict_GET_SIZE(positions) != 1) {
        PyErr_SetString(PyExc_ValueError, "lines without their zone are of one zone");
        return -1;
    }
    if (self->zones != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Loader is initialised once");
        return -1;
    }
    self->count = PyDict_GET_SIZE(positions);
    self->zones = PyMem_Calloc((size_t)(self->count ? self->count : 1), sizeof(Zone));
    if (self->zones == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->positions = PyDict_Copy(positions); /* bytes -> position, checked in zone_of */
    self->last = -1;
    self->zone_column = zone_column;
    return self->positions == NULL ? -1 : 0;
}

static void Loader_dealloc(Loader *self) {
    for (Py_ssize_t i = 0; self->zones != NULL && i < self->count; i++) {
        Py_CLEAR(self->zones[i].apex);
        Py_CLEAR(self->zones[i].nodes);
        Py_CLEAR(self->zones[i].more);
        Py_CLEAR(self->zones[i].notable);
    }
    PyMem_Free(self->zones);
    Py_CLEAR(self->positions);
    Py_CLEAR(self->last_key);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Zone *zone_at(Loader *self, Py_ssize_t position) {
    if (position < 0 || position >= self->count) {
        PyErr_SetString(PyExc_IndexError, "no such zone in this load");
        return NULL;
    }
    return &self->zones[position];
}

static PyObject *Loader_arm(Loader *self, PyObject *args) {
    Py_ssize_t position;
    PyObject *apex, *suffix, *nodes, *more, *notable;
    if (!PyArg_ParseTuple(args, "nO!O!O!O!O!:arm", &position, &PyBytes_Type, &apex,
                          &PyBytes_Type, &suffix, &PyDict_Type, &nodes, &PyDict_Type, &more,
                          &PySet_Type, &notable))
        return NULL;
    Zone *zone = zone_at(self, position);
    if (zone == NULL) return NULL;
    Py_ssize_t length = PyBytes_GET_SIZE(suffix);
    if (length < 2 || length > MAX_NAME + 1 || PyBytes_AS_STRING(suffix)[0] != '.') {
        PyErr_SetString(PyExc_ValueError, "a zone's suffix is '.' and its origin");
        return NULL;
    }
    memcpy(zone->suffix, PyBytes_AS_STRING(suffix), (size_t)length);
    zone->suffix_len = length;
    Py_XSETREF(zone->apex, Py_NewRef(apex));
    Py_XSETREF(zone->nodes, Py_NewRef(nodes));
    Py_XSETREF(zone->more, Py_NewRef(more));
    Py_XSETREF(zone->notable, Py_NewRef(notable));
    Py_RETURN_NONE;
}

static PyObject *Loader_refuse(Loader *self, PyObject *arg) {
    Py_ssize_t position = PyLong_AsSsize_t(arg);
    if (position == -1 && PyErr_Occurred()) return NULL;
    Zone *zone = zone_at(self, position);
    if (zone == NULL) return NULL;
    zone->refused = 1;
    Py_RETURN_NONE;
}

static PyObject *Loader_line(Loader *self, PyObject *arg) {
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a line is bytes");
        return NULL;
    }
    int taken = take(self, PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg));
    if (taken < 0) return NULL;
    return PyBool_FromLong(taken);
}

static PyObject *Loader_read(Loader *self, PyObject *args) {
    unsigned long long address;
    Py_ssize_t budget;
    if (!PyArg_ParseTuple(args, "Kn:read", &address, &budget)) return NULL;
    if (pq_get_copy_data == NULL || address == 0) {
        PyErr_SetString(PyExc_RuntimeError, "read needs libpq (use_libpq) and a connection");
        return NULL;
    }
    void *conn = (void *)(uintptr_t)address;
    Py_ssize_t rows = 0;
    while (rows < budget) {
        char *buffer = NULL;
        int size = pq_get_copy_data(conn, &buffer, 1);
        if (size <= 0) {
            int status = size == 0 ? R_WAIT : size == -1 ? R_DONE : R_FAILED;
            if (buffer != NULL) pq_freemem(buffer);
            return Py_BuildValue("inO", status, rows, Py_None);
        }
        int taken = take(self, buffer, size);
        if (taken != 1) {
            PyObject *line = taken == 0 ? PyBytes_FromStringAndSize(buffer, size) : NULL;
            pq_freemem(buffer);
            if (line == NULL) return NULL;
            return Py_BuildValue("inN", R_LINE, rows, line);
        }
        pq_freemem(buffer);
        rows++;
    }
    return Py_BuildValue("inO", R_BUDGET, rows, Py_None);
}

static PyMethodDef Loader_methods[] = {
    {"arm", (PyCFunction)Loader_arm, METH_VARARGS, "Take the zone's plain rows."},
    {"refuse", (PyCFunction)Loader_refuse, METH_O, "Skip the zone's rows."},
    {"line", (PyCFunction)Loader_line, METH_O, "Add a line; whether it was taken."},
    {"read", (PyCFunction)Loader_read, METH_VARARGS, "Take lines from libpq (rows.py)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "valis_core.dns.zone._rows.Loader",
    .tp_basicsize = sizeof(Loader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The zones of one bulk load, taking their plain rows.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loader_init,
    .tp_dealloc = (destructor)Loader_dealloc,
    .tp_methods = Loader_methods,
};

/* -- libpq ------------------------------------------------------------------- */

static PyObject *rows_use_libpq(PyObject *module, PyObject *arg) {
    (void)module;
    PyObject *encoded;
    if (!PyUnicode_FSConverter(arg, &encoded)) return NULL;
    void *handle = dlopen(PyBytes_AS_STRING(encoded), RTLD_LAZY | RTLD_NOLOAD);
    Py_DECREF(encoded);
    if (handle == NULL) {
        PyErr_Format(PyExc_OSError, "libpq %R is not loaded in this process", arg);
        return NULL;
    }
    get_copy_data_fn get = (get_copy_data_fn)dlsym(handle, "PQgetCopyData");
    freemem_fn freemem = (freemem_fn)dlsym(handle, "PQfreemem");
    lib_version_fn version = (lib_version_fn)dlsym(handle, "PQlibVersion");
    if (get == NULL || freemem == NULL || version == NULL) {
        dlclose(handle);
        PyErr_Format(PyExc_OSError, "%R does not look like libpq", arg);
        return NULL;
    }
    pq_get_copy_data = get; /* the handle stays open: the library stays loaded */
    pq_freemem = freemem;
    return PyLong_FromLong(version());
}

static PyMethodDef rows_methods[] = {
    {"use_libpq", rows_use_libpq, METH_O, "Read through this libpq, already loaded."},
    {"tree", rows_tree, METH_VARARGS, "tree.tree: (empty, children, wildcards)."},
    {"shards", rows_shards, METH_VARARGS, "owners.OwnerMap's shards of a dict."},
    {"merge_node", rows_merge_node, METH_O, "records.merge_node: (encoding, counts)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef rows_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "valis_core.dns.zone._rows",
    .m_doc = "The compiled row reader of a bulk zone load (see rows.py).",
    .m_size = -1,
    .m_methods = rows_methods,
};

PyMODINIT_FUNC PyInit__rows(void) {
    if (PyType_Ready(&LoaderType) < 0) return NULL;
    PyObject *module = PyModule_Create(&rows_module);
    if (module == NULL) return NULL;
    Py_INCREF(&LoaderType);
    if (PyModule_AddObject(module, "Loader", (PyObject *)&LoaderType) < 0) {
        Py_DECREF(&LoaderType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
