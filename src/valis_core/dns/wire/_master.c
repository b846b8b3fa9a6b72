/* The compiled lines of the master reader's plain path (valis_core.dns.wire._master).
 *
 * plain_lines reads the bulk of a zone, a run of lines each stating one record of A,
 * AAAA, NS, CNAME, PTR, MX, SRV or TXT (`[owner] [ttl] [IN] type rdata`, the TTL and class in
 * either order, a blank owner the previous record's), and the blank and comment lines
 * between them, exactly as master.plain_line reads them, with the reading state's TTL
 * rules, and emits their records. It stops at any other line (another type, a directive,
 * a name, address or number plain_line would hand to dnspython, any character but
 * printable ASCII, blanks and tabs, a record whose TTL or owner is not known), and
 * plain_line reads that one: the Python path stays the reference
 * (tests/property/test_master_compiled.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_spans.h"
#include "../_record_table.h"
#include <structmember.h>

#define UINT32_LIMIT 4294967295LL
#define MAX_TOKENS 64 /* owner, TTL, class, type and a TXT record's strings, at most */
#define MAX_STRING 255
#define MAX_RDATA ((MAX_TOKENS - 4) * (MAX_STRING + 1))

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

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

/* dns.ipv6.inet_aton of a text of hex digits and colons only, step by step as it reads
 * one (the dotted-quad ending and scopes are left to it); 16, or -1. */
static Py_ssize_t ipv6(Span s, unsigned char *out) {
    const char *at = s.at;
    Py_ssize_t len = s.len;
    if (len == 0) return -1;
    for (Py_ssize_t i = 0; i < len; i++)
        if (at[i] != ':' && hex_digit(at[i]) < 0) return -1;
    int ends2 = len >= 2 && at[len - 1] == ':' && at[len - 2] == ':';
    int starts2 = len >= 2 && at[0] == ':' && at[1] == ':';
    if (at[len - 1] == ':' && !ends2) return -1;
    if (at[0] == ':' && !starts2) return -1;
    if (len == 2 && starts2) { /* "::" reads as "0::", then "0:" */
        memset(out, 0, 16);
        return 16;
    }
    if (starts2) {
        at++;
        len--;
    } else if (ends2) {
        len--;
    }
    int chunks = 1;
    for (Py_ssize_t i = 0; i < len; i++) chunks += at[i] == ':';
    if (chunks > 8) return -1;
    int seen_empty = 0, written = 0;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i <= len; i++) {
        if (i < len && at[i] != ':') continue;
        Py_ssize_t size = i - start;
        if (size == 0) {
            if (seen_empty) return -1;
            seen_empty = 1;
            for (int k = 0; k < 8 - chunks + 1; k++, written += 2)
                out[written] = out[written + 1] = 0;
        } else {
            if (size > 4) return -1;
            unsigned value = 0;
            for (Py_ssize_t j = start; j < i; j++) value = value << 4 | (unsigned)hex_digit(at[j]);
            out[written++] = (unsigned char)(value >> 8);
            out[written++] = (unsigned char)value;
        }
        start = i + 1;
    }
    if (chunks < 8 && !seen_empty) return -1;
    return written == 16 ? 16 : -1;
}

/* The types read here (master._PLAIN_TYPES but SOA, which sets the default TTL). */
enum { T_A = 1, T_NS = 2, T_CNAME = 5, T_PTR = 12, T_MX = 15, T_TXT = 16, T_AAAA = 28, T_SRV = 33 };

static int plain_type(Span s) {
    if (same(s, "a")) return T_A;
    if (same(s, "aaaa")) return T_AAAA;
    if (same(s, "ns")) return T_NS;
    if (same(s, "cname")) return T_CNAME;
    if (same(s, "mx")) return T_MX;
    if (same(s, "ptr")) return T_PTR;
    if (same(s, "srv")) return T_SRV;
    if (same(s, "txt")) return T_TXT;
    return 0;
}

/* master._plain_rdata (and plain_line's A) of `count` fields: the rdata's length in
 * `out`, or -1 for a line plain_line must read. */
static Py_ssize_t plain_rdata(int rtype, const Span *fields, int count, const char *origin,
                              Py_ssize_t origin_len, char *out) {
    switch (rtype) {
    case T_A:
        return count == 1 ? ipv4(fields[0], out) : -1;
    case T_AAAA:
        return count == 1 ? ipv6(fields[0], (unsigned char *)out) : -1;
    case T_NS:
    case T_CNAME:
    case T_PTR:
        return count == 1 ? owner_name(fields[0], origin, origin_len, out) : -1;
    case T_MX: {
        if (count != 2) return -1;
        long long preference = number(fields[0], 0xFFFF);
        if (preference < 0) return -1;
        out[0] = (char)(preference >> 8);
        out[1] = (char)preference;
        Py_ssize_t n = owner_name(fields[1], origin, origin_len, out + 2);
        return n < 0 ? -1 : n + 2;
    }
    case T_TXT: { /* master._txt: words and quoted strings, each a character-string */
        Py_ssize_t written = 0;
        for (int k = 0; k < count; k++) {
            Span text = fields[k];
            if (text.at[0] == '"') text = (Span){text.at + 1, text.len - 2};
            if (text.len > MAX_STRING) return -1;
            out[written++] = (char)text.len;
            memcpy(out + written, text.at, (size_t)text.len);
            written += text.len;
        }
        return count ? written : -1;
    }
    case T_SRV: {
        if (count != 4) return -1;
        for (int k = 0; k < 3; k++) {
            long long value = number(fields[k], 0xFFFF);
            if (value < 0) return -1;
            out[2 * k] = (char)(value >> 8);
            out[2 * k + 1] = (char)value;
        }
        Py_ssize_t n = owner_name(fields[3], origin, origin_len, out + 6);
        return n < 0 ? -1 : n + 6;
    }
    }
    return -1;
}

/* One line read as plain_line reads it (a record of a type above, or nothing on it):
 * 1 with the record's owner (`owner_len` 0: the previous owner's), type, ttl (-1: none
 * stated) and rdata filled in, 2 for a line holding no record, 0 for a line plain_line
 * must read. */
static int read_line(const char *at, Py_ssize_t size, const char *origin, Py_ssize_t origin_len,
                     char *owner, Py_ssize_t *owner_len, int *rtype_out, long long *ttl_out,
                     char *rdata, Py_ssize_t *rdata_len) {
    Span tokens[MAX_TOKENS];
    int count = 0;
    /* master._quoted_tokens: a line with quotes has no comment, and a quote stands only
     * around a whole token (which dnspython's is a ";" there: its to say). */
    int quoted = memchr(at, '"', (size_t)size) != NULL;
    if (quoted && memchr(at, ';', (size_t)size) != NULL) return 0;
    for (Py_ssize_t i = 0; i < size;) {
        char c = at[i];
        if (c == ';') break; /* a comment runs to the end of the line */
        if (c == ' ' || c == '\t') {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        if (c == '"') {
            for (i++; i < size && at[i] != '"'; i++)
                if ((at[i] < 0x20 && at[i] != '\t') || at[i] > 0x7e) return 0;
            if (i == size) return 0; /* never closed */
            i++;
            if (i < size && at[i] != ' ' && at[i] != '\t') return 0;
        } else {
            for (; i < size && at[i] != ' ' && at[i] != '\t' && at[i] != ';'; i++)
                if (at[i] < 0x21 || at[i] > 0x7e || at[i] == '"') return 0;
        }
        if (count == MAX_TOKENS) return 0;
        tokens[count++] = (Span){at + start, i - start};
    }
    if (count == 0) return 2; /* blank or a comment (the origin is known here) */
    int i = 0;
    if (tokens[0].at == at) { /* column 1 holds the owner, or a directive */
        if (at[0] == '$') return 0;
        *owner_len = owner_name(tokens[0], origin, origin_len, owner);
        if (*owner_len < 0) return 0;
        i = 1;
    } else {
        *owner_len = 0; /* a blank: the previous owner's */
    }
    if (i == count) return 0;
    /* plain_line's order: a TTL then perhaps the class, or the class then perhaps a TTL,
     * each only when a token still follows it. */
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
    int rtype = plain_type(token);
    if (rtype == 0 || ttl > UINT32_LIMIT) return 0;
    if (quoted) { /* quotes stand only in a TXT record's strings */
        if (rtype != T_TXT) return 0;
        for (int k = 0; k <= i; k++)
            if (tokens[k].at[0] == '"') return 0;
    }
    *rdata_len = plain_rdata(rtype, tokens + i + 1, count - i - 1, origin, origin_len, rdata);
    if (*rdata_len < 0) return 0;
    *rtype_out = rtype;
    *ttl_out = ttl;
    return 1;
}


/* ---- RecordTable: records read into C memory, for a check that needs no Python object
 * per record (_record_table.h) ---- */

typedef struct {
    PyObject_HEAD
    PyObject *records; /* bytearray of TableRecord */
    PyObject *arena;   /* bytearray: the owners' and rdatas' octets */
} RecordTable;

static PyTypeObject RecordTableType;

/* Room for `more` octets at the end of a bytearray; the offset where they go, or -1 on
 * an error. Short of room, it doubles (a bytearray's own resize grows it by an eighth, so
 * a large table would be copied some hundred times); PyByteArray_Resize then takes it
 * back to the size in use without giving the room back. */
static Py_ssize_t grow(PyObject *array, Py_ssize_t more) {
    Py_ssize_t size = PyByteArray_GET_SIZE(array);
    if (more > PY_SSIZE_T_MAX / 2 - size) {
        PyErr_NoMemory();
        return -1;
    }
    if (size + more + 1 > ((PyByteArrayObject *)array)->ob_alloc &&
        PyByteArray_Resize(array, 2 * (size + more)) < 0)
        return -1;
    return PyByteArray_Resize(array, size + more) < 0 ? -1 : size;
}

static int table_add(RecordTable *t, const char *owner, Py_ssize_t owner_len, long rtype,
                     long long ttl, const char *rdata, Py_ssize_t rdata_len, Py_ssize_t line) {
    if (owner_len > INT32_MAX || rdata_len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "record too long for a record table");
        return -1;
    }
    Py_ssize_t at = grow(t->arena, owner_len + rdata_len);
    Py_ssize_t slot = at < 0 ? -1 : grow(t->records, (Py_ssize_t)sizeof(TableRecord));
    if (slot < 0) return -1;
    char *octets = PyByteArray_AS_STRING(t->arena) + at;
    memcpy(octets, owner, (size_t)owner_len);
    memcpy(octets + owner_len, rdata, (size_t)rdata_len);
    TableRecord record = {at, at + owner_len, ttl, (int32_t)owner_len, (int32_t)rdata_len,
                          (int32_t)rtype, line > INT32_MAX ? 0 : (int32_t)line};
    memcpy(PyByteArray_AS_STRING(t->records) + slot, &record, sizeof record);
    return 0;
}

/* RecordTable.append(record): one record read in Python, (owner, type, TTL, rdata). */
static PyObject *table_append(PyObject *self, PyObject *record) {
    if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 4 ||
        !PyBytes_Check(PyTuple_GET_ITEM(record, 0)) || !PyBytes_Check(PyTuple_GET_ITEM(record, 3))) {
        PyErr_SetString(PyExc_TypeError, "a record is (owner, type, TTL, rdata)");
        return NULL;
    }
    long rtype = PyLong_AsLong(PyTuple_GET_ITEM(record, 1));
    long long ttl = PyLong_AsLongLong(PyTuple_GET_ITEM(record, 2));
    if (PyErr_Occurred()) return NULL;
    PyObject *owner = PyTuple_GET_ITEM(record, 0), *rdata = PyTuple_GET_ITEM(record, 3);
    if (table_add((RecordTable *)self, PyBytes_AS_STRING(owner), PyBytes_GET_SIZE(owner), rtype,
                  ttl, PyBytes_AS_STRING(rdata), PyBytes_GET_SIZE(rdata), 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* RecordTable.set_line(line): the line the last record appended starts on (read_master's
 * `positions` protocol: each record's line follows it). */
static PyObject *table_set_line(PyObject *self, PyObject *arg) {
    RecordTable *t = (RecordTable *)self;
    Py_ssize_t line = PyLong_AsSsize_t(arg);
    if (line == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t size = PyByteArray_GET_SIZE(t->records);
    if (size < (Py_ssize_t)sizeof(TableRecord)) {
        PyErr_SetString(PyExc_IndexError, "no record to give a line to");
        return NULL;
    }
    TableRecord *last = (TableRecord *)(PyByteArray_AS_STRING(t->records) + size) - 1;
    last->line = line < 0 || line > INT32_MAX ? 0 : (int32_t)line;
    Py_RETURN_NONE;
}

/* RecordTable.rows(): every record as read_master emits it, (owner, type, TTL, rdata),
 * and the lines they start on: for a reader that needs them after all. */
static PyObject *table_rows(PyObject *self, PyObject *unused) {
    (void)unused;
    RecordTable *t = (RecordTable *)self;
    Py_ssize_t count = PyByteArray_GET_SIZE(t->records) / (Py_ssize_t)sizeof(TableRecord);
    const TableRecord *held = (const TableRecord *)PyByteArray_AS_STRING(t->records);
    const char *arena = PyByteArray_AS_STRING(t->arena);
    PyObject *records = PyList_New(count), *lines = PyList_New(count), *owner = NULL;
    if (records == NULL || lines == NULL) goto failed;
    for (Py_ssize_t i = 0; i < count; i++) {
        const TableRecord *r = &held[i];
        /* an owner spelt as the record before's is that one's object, as the reader's */
        if (owner == NULL || i == 0 || r->owner_len != held[i - 1].owner_len ||
            memcmp(arena + r->owner, arena + held[i - 1].owner, (size_t)r->owner_len) != 0) {
            Py_XDECREF(owner);
            owner = PyBytes_FromStringAndSize(arena + r->owner, r->owner_len);
            if (owner == NULL) goto failed;
        }
        PyObject *record = Py_BuildValue("(OiLy#)", owner, (int)r->rtype, (long long)r->ttl,
                                         arena + r->rdata, (Py_ssize_t)r->rdata_len);
        PyObject *line = PyLong_FromLong(r->line);
        if (record == NULL || line == NULL) {
            Py_XDECREF(record);
            Py_XDECREF(line);
            goto failed;
        }
        PyList_SET_ITEM(records, i, record);
        PyList_SET_ITEM(lines, i, line);
    }
    Py_XDECREF(owner);
    return Py_BuildValue("(NN)", records, lines);
failed:
    Py_XDECREF(owner);
    Py_XDECREF(records);
    Py_XDECREF(lines);
    return NULL;
}

static PyObject *table_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (!_PyArg_NoPositional("RecordTable", args) || !_PyArg_NoKeywords("RecordTable", kwargs))
        return NULL;
    RecordTable *t = (RecordTable *)type->tp_alloc(type, 0);
    if (t == NULL) return NULL;
    t->records = PyByteArray_FromStringAndSize(NULL, 0);
    t->arena = PyByteArray_FromStringAndSize(NULL, 0);
    if (t->records == NULL || t->arena == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void table_dealloc(RecordTable *t) {
    Py_XDECREF(t->records);
    Py_XDECREF(t->arena);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t table_len(PyObject *self) {
    return PyByteArray_GET_SIZE(((RecordTable *)self)->records) / (Py_ssize_t)sizeof(TableRecord);
}

static PyMethodDef table_methods[] = {
    {"append", table_append, METH_O, "append(record): add one (owner, type, TTL, rdata)"},
    {"set_line", table_set_line, METH_O, "set_line(line): the last record's line"},
    {"rows", table_rows, METH_NOARGS, "rows() -> (records, lines), as the reader emits them"},
    {NULL, NULL, 0, NULL}};

static PyMemberDef table_members[] = {
    {"records", T_OBJECT_EX, offsetof(RecordTable, records), READONLY,
     "the records (TableRecord each, _record_table.h)"},
    {"arena", T_OBJECT_EX, offsetof(RecordTable, arena), READONLY,
     "the octets the records point into"},
    {NULL, 0, 0, 0, NULL}};

static PySequenceMethods table_sequence = {.sq_length = table_len};

static PyTypeObject RecordTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "valis_core.dns.wire._master.RecordTable",
    .tp_basicsize = sizeof(RecordTable),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_as_sequence = &table_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records read from a master file, kept in C memory (_record_table.h).",
    .tp_methods = table_methods,
    .tp_members = table_members,
    .tp_new = table_new,
};

/* Whether `positions` is the bound set_line of `table` (a table keeps its lines). */
static int table_line_setter(PyObject *positions, RecordTable *table) {
    return PyCFunction_Check(positions) && PyCFunction_GET_SELF(positions) == (PyObject *)table &&
           PyCFunction_GET_FUNCTION(positions) == (PyCFunction)table_set_line;
}

/* The table `emit` appends to when it is a RecordTable's bound append, else NULL. */
static RecordTable *emit_table(PyObject *emit) {
    if (!PyCFunction_Check(emit)) return NULL;
    PyObject *self = PyCFunction_GET_SELF(emit);
    if (self == NULL || !Py_IS_TYPE(self, &RecordTableType)) return NULL;
    return PyCFunction_GET_FUNCTION(emit) == (PyCFunction)table_append ? (RecordTable *)self : NULL;
}

/* The text of a str that is ASCII, else NULL. */
static const char *ascii(PyObject *text, Py_ssize_t *size) {
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) return NULL;
    *size = PyUnicode_GET_LENGTH(text);
    return (const char *)PyUnicode_DATA(text);
}

/* One record line of a run, as read_line reads it and with its TTL known. */
typedef struct {
    char owner[MAX_NAME + 1], rdata[MAX_RDATA];
    Py_ssize_t owner_len, rdata_len; /* owner_len 0: the previous record's owner */
    long long ttl;
    int rtype;
} LineRecord;

/* The next record of lines[*index:stop], skipping blank and comment lines, its TTL set by
 * the reading state's RFC 2308 rule (`implicit` and `stated` updated as plain_line
 * updates the state; `follows`: a stated TTL becomes the implicit one); 1, or 0 at the
 * line where the run stops (*index then that line's). `known`: whether a previous owner
 * is known (a line starting blank stops the run otherwise). */
static int next_record(PyObject *lines, Py_ssize_t *index, Py_ssize_t stop, const char *origin,
                       Py_ssize_t origin_len, int known, long long *implicit, int follows,
                       long long *stated, LineRecord *r) {
    for (; *index < stop; (*index)++) {
        Py_ssize_t size;
        const char *at = ascii(PyList_GET_ITEM(lines, *index), &size);
        if (at == NULL) return 0;
        int read = read_line(at, size, origin, origin_len, r->owner, &r->owner_len, &r->rtype,
                             &r->ttl, r->rdata, &r->rdata_len);
        if (read == 2) continue;
        if (read == 0 || (r->owner_len == 0 && !known)) return 0;
        if (r->ttl < 0) {
            if (*implicit < 0) return 0; /* no TTL is known: plain_line says so */
            r->ttl = *implicit;
        } else {
            *stated = r->ttl;
            if (follows) *implicit = r->ttl;
        }
        return 1;
    }
    return 0;
}

/* plain_lines into a RecordTable: the same reading, each record written to the table
 * with its line (no Python object made for it). */
static PyObject *table_lines(PyObject *lines, Py_ssize_t start, Py_ssize_t stop,
                             const char *origin, Py_ssize_t origin_len, PyObject *last_obj,
                             long long implicit, int follows, RecordTable *table) {
    char previous[MAX_NAME + 1];
    Py_ssize_t previous_len = -1; /* none known */
    int emitted = 0;
    if (last_obj != Py_None) {
        previous_len = PyBytes_GET_SIZE(last_obj);
        if (previous_len > MAX_NAME) return Py_BuildValue("(nOO)", start, Py_None, Py_None);
        memcpy(previous, PyBytes_AS_STRING(last_obj), (size_t)previous_len);
    }
    long long stated = -1;
    Py_ssize_t index = start;
    LineRecord r;
    for (; next_record(lines, &index, stop, origin, origin_len, previous_len >= 0, &implicit,
                       follows, &stated, &r);
         index++) {
        if (r.owner_len) {
            memcpy(previous, r.owner, (size_t)r.owner_len);
            previous_len = r.owner_len;
        }
        if (table_add(table, previous, previous_len, r.rtype, r.ttl, r.rdata, r.rdata_len,
                      index + 1) < 0)
            return NULL;
        emitted = 1;
    }
    if (!emitted) return Py_BuildValue("(nOO)", index, Py_None, Py_None);
    return stated < 0 ? Py_BuildValue("(ny#O)", index, previous, previous_len, Py_None)
                      : Py_BuildValue("(ny#L)", index, previous, previous_len, stated);
}

/* plain_lines(lines, start, stop, origin, last_owner, implicit, follows, emit, positions):
 * read lines[start:stop] while each is a line read_line takes, as master.plain_line
 * reads them: a line starting blank is the previous record's owner's (`last_owner`, None:
 * stop there), a record stating no TTL takes `implicit` (None: stop there), and one
 * stating it makes that TTL the implicit one from then on if `follows` (the reading
 * state's RFC 2308 rule); emit each record and append its line number to `positions`
 * (or None). Returns (the index of the first line not read, the last record's owner or
 * None, the last TTL a record stated or None): what the reading state takes from the run. */
static PyObject *master_plain_lines(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *lines, *last_obj, *implicit_obj, *emit, *positions;
    Py_ssize_t start, stop, origin_len;
    const char *origin;
    int follows;
    if (!PyArg_ParseTuple(args, "O!nny#OOpOO", &PyList_Type, &lines, &start, &stop, &origin,
                          &origin_len, &last_obj, &implicit_obj, &follows, &emit, &positions))
        return NULL;
    if (stop > PyList_GET_SIZE(lines)) stop = PyList_GET_SIZE(lines);
    long long implicit = -1;
    if (implicit_obj != Py_None) {
        implicit = PyLong_AsLongLong(implicit_obj);
        if (implicit == -1 && PyErr_Occurred()) return NULL;
    }
    if (origin_len < 1 || origin_len > MAX_NAME || (last_obj != Py_None && !PyBytes_Check(last_obj)))
        return Py_BuildValue("(nOO)", start, Py_None, Py_None);
    RecordTable *table = emit_table(emit);
    if (table != NULL && (positions == Py_None || table_line_setter(positions, table)))
        return table_lines(lines, start, stop, origin, origin_len, last_obj, implicit, follows,
                           table);
    PyObject *previous = last_obj == Py_None ? NULL : Py_NewRef(last_obj);
    PyObject *last_owner = NULL; /* the run's, when it emitted a record */
    long long stated = -1;
    Py_ssize_t index = start;
    LineRecord r;
    for (; next_record(lines, &index, stop, origin, origin_len, previous != NULL, &implicit,
                       follows, &stated, &r);
         index++) {
        PyObject *key = r.owner_len ? PyBytes_FromStringAndSize(r.owner, r.owner_len)
                                    : Py_NewRef(previous);
        PyObject *record = key == NULL ? NULL : Py_BuildValue(
            "(OiLy#)", key, r.rtype, r.ttl, r.rdata, r.rdata_len);
        PyObject *done = record == NULL ? NULL : PyObject_CallOneArg(emit, record);
        Py_XDECREF(record);
        int failed = done == NULL;
        Py_XDECREF(done);
        if (!failed && positions != Py_None) {
            PyObject *line = PyLong_FromSsize_t(index + 1);
            failed = line == NULL || PyList_Append(positions, line) < 0;
            Py_XDECREF(line);
        }
        if (failed) {
            Py_XDECREF(key);
            Py_XDECREF(last_owner);
            Py_XDECREF(previous);
            return NULL;
        }
        Py_XSETREF(previous, Py_NewRef(key));
        Py_XSETREF(last_owner, key);
    }
    Py_XDECREF(previous);
    if (last_owner == NULL) return Py_BuildValue("(nOO)", index, Py_None, Py_None);
    PyObject *result = stated < 0
        ? Py_BuildValue("(nOO)", index, last_owner, Py_None)
        : Py_BuildValue("(nOL)", index, last_owner, stated);
    Py_DECREF(last_owner);
    return result;
}

static PyMethodDef master_methods[] = {
    {"plain_lines", master_plain_lines, METH_VARARGS,
     "plain_lines(lines, start, stop, origin, last_owner, implicit, follows, emit, positions)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef master_module = {
    PyModuleDef_HEAD_INIT, "_master", "The compiled line of the master reader's plain path.",
    -1, master_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__master(void) {
    if (PyType_Ready(&RecordTableType) < 0) return NULL;
    PyObject *module = PyModule_Create(&master_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "RecordTable", (PyObject *)&RecordTableType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
