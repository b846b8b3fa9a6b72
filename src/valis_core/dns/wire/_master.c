/* The compiled line of the master reader's plain path (valis_core.dns.wire._master).
 *
 * a_lines reads the bulk of a large zone, a run of lines each stating an A record with
 * its owner in column 1 (`owner [ttl] [IN] A address`, the TTL and class in either
 * order), exactly as master.plain_line reads them, with the reading state's TTL rules,
 * and emits their records. It stops at any other line (another type, a directive, a
 * blank owner, a name or address plain_line would hand to dnspython, any character but
 * printable ASCII, blanks and tabs, a record whose TTL is not known), and plain_line
 * reads that one: the Python path stays the reference
 * (tests/property/test_master_compiled.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_spans.h"

#define UINT32_LIMIT 4294967295LL
#define MAX_TOKENS 7 /* owner, TTL, class, type, address: any more is not an A line */

/* master._name: a plain name token made absolute against `origin`, into `out`; its
 * length, or -1 (plain_line then gives the line to dnspython, or reads it itself). */
static Py_ssize_t owner_name(Span s, const char *origin, Py_ssize_t origin_len, char *out) {
    if (s.at[s.len - 1] != '.') {
        if (s.len == 1 && s.at[0] == '@') {
            memcpy(out, origin, (size_t)origin_len);
            return origin_len;
        }
        Py_ssize_t n = labels(s, out, MAX_NAME, 0);
        if (n < 0 || n + origin_len > MAX_NAME) return -1;
        memcpy(out + n, origin, (size_t)origin_len);
        return n + origin_len;
    }
    if (s.len == 1) {
        out[0] = 0;
        return 1;
    }
    Span inner = {s.at, s.len - 1};
    Py_ssize_t n = labels(inner, out, MAX_NAME, 0);
    if (n < 0 || n >= MAX_NAME) return -1;
    out[n] = 0;
    return n + 1;
}

/* str.isdigit of an ASCII token, and its value capped above UINT32_LIMIT. */
static int digits(Span s, long long *value) {
    long long v = 0;
    for (Py_ssize_t i = 0; i < s.len; i++) {
        if (s.at[i] < '0' || s.at[i] > '9') return 0;
        if (v <= UINT32_LIMIT) v = v * 10 + (s.at[i] - '0');
    }
    *value = v;
    return s.len > 0;
}

/* One A line read as plain_line reads it: 1 with owner, ttl (-1: none stated) and the
 * address filled in, 0 for a line plain_line must read. */
static int read_a(const char *at, Py_ssize_t size, const char *origin, Py_ssize_t origin_len,
                  char *owner, Py_ssize_t *owner_len, long long *ttl_out, char *address) {
    Span tokens[MAX_TOKENS];
    int count = 0;
    for (Py_ssize_t i = 0; i < size;) {
        char c = at[i];
        if (c == ';') break; /* a comment runs to the end of the line */
        if (c == ' ' || c == '\t') {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        for (; i < size && at[i] != ' ' && at[i] != '\t' && at[i] != ';'; i++)
            if (at[i] < 0x21 || at[i] > 0x7e) return 0;
        if (count == MAX_TOKENS) return 0;
        tokens[count++] = (Span){at + start, i - start};
    }
    /* Column 1 holds the owner: not a blank (the previous owner's), not a directive. */
    if (count < 3 || tokens[0].at != at || at[0] == '$') return 0;
    *owner_len = owner_name(tokens[0], origin, origin_len, owner);
    if (*owner_len < 0) return 0;
    /* plain_line's order: a TTL then perhaps the class, or the class then perhaps a TTL,
     * each only when a token still follows it. */
    int i = 1;
    long long ttl = -1;
    Span token = tokens[i];
    if (i + 1 < count) {
        long long value;
        if (digits(token, &value)) {
            ttl = value;
            token = tokens[++i];
            if (same(token, "in") && i + 1 < count) token = tokens[++i];
        } else if (same(token, "in")) {
            token = tokens[++i];
            if (i + 1 < count && digits(token, &value)) {
                ttl = value;
                token = tokens[++i];
            }
        }
    }
    if (!same(token, "a") || ttl > UINT32_LIMIT || i + 2 != count) return 0;
    if (ipv4(tokens[i + 1], address) != 4) return 0;
    *ttl_out = ttl;
    return 1;
}

/* The text of a str that is ASCII, else NULL. */
static const char *ascii(PyObject *text, Py_ssize_t *size) {
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) return NULL;
    *size = PyUnicode_GET_LENGTH(text);
    return (const char *)PyUnicode_DATA(text);
}

/* a_lines(lines, start, stop, origin, implicit, follows, emit, positions): read
 * lines[start:stop] while each is an A line a_line takes, as master._compiled_line reads
 * them: a record stating no TTL takes `implicit` (None: stop there), and one stating it
 * makes that TTL the implicit one from then on if `follows` (the reading state's RFC
 * 2308 rule); emit each record and append its line number to `positions` (or None).
 * Returns (the index of the first line not read, the last record's owner or None, the
 * last TTL a record stated or None): what the reading state takes from the run. */
static PyObject *master_a_lines(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *lines, *implicit_obj, *emit, *positions;
    Py_ssize_t start, stop, origin_len;
    const char *origin;
    int follows;
    if (!PyArg_ParseTuple(args, "O!nny#OpOO", &PyList_Type, &lines, &start, &stop, &origin,
                          &origin_len, &implicit_obj, &follows, &emit, &positions))
        return NULL;
    if (stop > PyList_GET_SIZE(lines)) stop = PyList_GET_SIZE(lines);
    long long implicit = -1;
    if (implicit_obj != Py_None) {
        implicit = PyLong_AsLongLong(implicit_obj);
        if (implicit == -1 && PyErr_Occurred()) return NULL;
    }
    if (origin_len < 1 || origin_len > MAX_NAME)
        return Py_BuildValue("(nOO)", start, Py_None, Py_None);
    PyObject *last_owner = NULL;
    long long stated = -1;
    Py_ssize_t index = start;
    for (; index < stop; index++) {
        Py_ssize_t size, owner_len;
        const char *at = ascii(PyList_GET_ITEM(lines, index), &size);
        char owner[MAX_NAME + 1], address[4];
        long long ttl;
        if (at == NULL || !read_a(at, size, origin, origin_len, owner, &owner_len, &ttl, address))
            break;
        if (ttl < 0) {
            if (implicit < 0) break; /* no TTL is known: plain_line says so */
            ttl = implicit;
        } else {
            stated = ttl;
            if (follows) implicit = ttl;
        }
        PyObject *key = PyBytes_FromStringAndSize(owner, owner_len);
        PyObject *record = key == NULL ? NULL : Py_BuildValue(
            "(OiLy#)", key, 1, ttl, address, (Py_ssize_t)4);
        PyObject *done = record == NULL ? NULL : PyObject_CallOneArg(emit, record);
        Py_XDECREF(record);
        int failed = done == NULL;
        Py_XDECREF(done);
        if (!failed && positions != Py_None) {
            PyObject *number = PyLong_FromSsize_t(index + 1);
            failed = number == NULL || PyList_Append(positions, number) < 0;
            Py_XDECREF(number);
        }
        if (failed) {
            Py_XDECREF(key);
            Py_XDECREF(last_owner);
            return NULL;
        }
        Py_XSETREF(last_owner, key);
    }
    if (last_owner == NULL) return Py_BuildValue("(nOO)", index, Py_None, Py_None);
    PyObject *result = stated < 0
        ? Py_BuildValue("(nOO)", index, last_owner, Py_None)
        : Py_BuildValue("(nOL)", index, last_owner, stated);
    Py_DECREF(last_owner);
    return result;
}

static PyMethodDef master_methods[] = {
    {"a_lines", master_a_lines, METH_VARARGS,
     "a_lines(lines, start, stop, origin, implicit, follows, emit, positions)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef master_module = {
    PyModuleDef_HEAD_INIT, "_master", "The compiled line of the master reader's plain path.",
    -1, master_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__master(void) { return PyModule_Create(&master_module); }
