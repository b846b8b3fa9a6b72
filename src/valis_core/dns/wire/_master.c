/* The compiled line of the master reader's plain path (valis_core.dns.wire._master).
 *
 * a_line(line, origin) reads the bulk of a large zone, a line stating an A record with
 * its owner in column 1 (`owner [ttl] [IN] A address`, the TTL and class in either
 * order), exactly as master.plain_line reads it, and returns (owner, ttl or None, rdata)
 * in wire form; master.py then applies the reading state's TTL rules as plain_line does.
 * It returns None for any other line (another type, a directive, a blank owner, a name
 * or address plain_line would hand to dnspython, any character but printable ASCII,
 * blanks and tabs), and plain_line reads that one: the Python path stays the reference
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

static PyObject *master_a_line(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *line;
    const char *origin;
    Py_ssize_t origin_len;
    if (!PyArg_ParseTuple(args, "Uy#", &line, &origin, &origin_len)) return NULL;
    if (!PyUnicode_IS_ASCII(line) || origin_len < 1 || origin_len > MAX_NAME)
        Py_RETURN_NONE;
    const char *at = (const char *)PyUnicode_DATA(line);
    Py_ssize_t size = PyUnicode_GET_LENGTH(line);
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
            if (at[i] < 0x21 || at[i] > 0x7e) Py_RETURN_NONE;
        if (count == MAX_TOKENS) Py_RETURN_NONE;
        tokens[count++] = (Span){at + start, i - start};
    }
    /* Column 1 holds the owner: not a blank (the previous owner's), not a directive. */
    if (count < 3 || tokens[0].at != at || at[0] == '$') Py_RETURN_NONE;
    char owner[MAX_NAME + 1];
    Py_ssize_t owner_len = owner_name(tokens[0], origin, origin_len, owner);
    if (owner_len < 0) Py_RETURN_NONE;
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
    if (!same(token, "a") || ttl > UINT32_LIMIT || i + 2 != count) Py_RETURN_NONE;
    char address[4];
    if (ipv4(tokens[i + 1], address) != 4) Py_RETURN_NONE;
    if (ttl < 0)
        return Py_BuildValue("(y#Oy#)", owner, owner_len, Py_None, address, (Py_ssize_t)4);
    return Py_BuildValue("(y#Ly#)", owner, owner_len, ttl, address, (Py_ssize_t)4);
}

static PyMethodDef master_methods[] = {
    {"a_line", master_a_line, METH_VARARGS,
     "a_line(line, origin): (owner, ttl or None, rdata) of an A line, or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef master_module = {
    PyModuleDef_HEAD_INIT, "_master", "The compiled line of the master reader's plain path.",
    -1, master_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__master(void) { return PyModule_Create(&master_module); }
