/* The compiled run of `valis zone check`'s loop over records (valis_core.dns.zone._check).
 *
 * records_run takes, from an index on, each record the check's Python loop (zone/check.py)
 * would add with Builder.add_wire and note without a finding, and does exactly what that
 * loop does with it: the record into the zone's owner tables (_ZoneParts.put: an owner's
 * first record alone, noted if NS, SOA or DNAME; later ones joined in `more`), and the
 * check's notes of where each owner, RRset and record first stands (check._Lines). It
 * stops at any record that brings a finding or may (a type not yet found servable, data
 * outside the zone, a TTL or rdata out of range, a TTL differing within its RRset, a
 * duplicate, an owner or target name that may look written without its trailing dot)
 * or that it does not take, before changing anything, and the Python loop takes that one:
 * the Python loop stays the reference (tests/property/test_master_compiled.py checks a
 * file the same with and without this run, findings and their order included).
 *
 * clean_count comes first: it proves a whole file free of findings from its records alone
 * (a hash table of owners, each owner's records compared among themselves, the apex and
 * the name servers looked up), with no Python object made per record, and otherwise says
 * it cannot tell; anything it does not judge (a DNAME, a server only a wildcard answers
 * for, a name that may look undotted) counts as doubt (test_zone_check_clean.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_record_table.h"

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

/* bytes.lower() of a name (ASCII letters only; a length octet is never one) into `out`. */
static void lower(const unsigned char *written, Py_ssize_t len, unsigned char *out) {
    for (Py_ssize_t i = 0; i < len; i++)
        out[i] = written[i] >= 'A' && written[i] <= 'Z' ? written[i] | 0x20 : written[i];
}

/* The name check._target reads in `data` (rdata of `size` octets) at `at` (uncompressed), lowercased into
 * `target`; its length, or -1 when no whole name stands there. */
static Py_ssize_t target_name(const unsigned char *data, Py_ssize_t size, Py_ssize_t at,
                              unsigned char *target) {
    Py_ssize_t i = at, n = 0;
    while (i < size && data[i] && n + data[i] + 1 < MAX_NAME && i + data[i] < size) {
        for (Py_ssize_t j = i; j <= i + data[i]; j++, n++)
            target[n] = data[j] >= 'A' && data[j] <= 'Z' ? data[j] | 0x20 : data[j];
        i += data[i] + 1;
    }
    if (i >= size || data[i]) return -1;
    target[n++] = 0;
    return n;
}

/* The record (RR_HEAD: type, class IN, TTL, length; then the rdata) Builder._put keeps. */
static PyObject *wire_record(long rtype, long long ttl, PyObject *rdata) {
    Py_ssize_t size = PyBytes_GET_SIZE(rdata);
    PyObject *held = PyBytes_FromStringAndSize(NULL, 10 + size);
    if (held == NULL) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(held);
    unsigned long long t = (unsigned long long)ttl;
    unsigned char head[10] = {
        (unsigned char)(rtype >> 8), (unsigned char)rtype, 0, 1, (unsigned char)(t >> 24),
        (unsigned char)(t >> 16), (unsigned char)(t >> 8), (unsigned char)t,
        (unsigned char)(size >> 8), (unsigned char)size};
    memcpy(out, head, 10);
    memcpy(out + 10, PyBytes_AS_STRING(rdata), (size_t)size);
    return held;
}

/* The fields of records[index] the check reads, borrowed; 0 if not such a record. */
static int fields(PyObject *records, Py_ssize_t index, PyObject **owner, PyObject **rtype,
                  PyObject **ttl, PyObject **rdata) {
    if (index < 0 || index >= PyList_GET_SIZE(records)) return 0;
    PyObject *record = PyList_GET_ITEM(records, index);
    if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 4) return 0;
    *owner = PyTuple_GET_ITEM(record, 0);
    *rtype = PyTuple_GET_ITEM(record, 1);
    *ttl = PyTuple_GET_ITEM(record, 2);
    *rdata = PyTuple_GET_ITEM(record, 3);
    return PyBytes_Check(*owner) && PyLong_Check(*rtype) && PyLong_Check(*ttl) &&
           PyBytes_Check(*rdata);
}

typedef struct {
    PyObject *records, *positions, *nodes, *notable, *more, *first, *second, *rrset, *noted,
        *undotted;
} Tables;

/* check._note_again of an owner's later record, with Builder's owner tables as
 * _ZoneParts.put leaves them: 1 done, 0 for a record that would bring a finding (a TTL
 * differing within its RRset, a duplicate, an owner that looked undotted) or that this
 * does not take (then nothing was changed), -1 on an error. */
static int again(const Tables *t, PyObject *key, PyObject *first_obj, Py_ssize_t index,
                 PyObject *rtype, PyObject *ttl, PyObject *rdata, PyObject *record) {
    int in = PySet_Contains(t->undotted, key);
    if (in != 0) return in < 0 ? -1 : 0;
    Py_ssize_t first = PyLong_AsSsize_t(first_obj);
    PyObject *owner_f, *rtype_f, *ttl_f, *rdata_f;
    if (first == -1 && PyErr_Occurred()) return -1;
    if (!fields(t->records, first, &owner_f, &rtype_f, &ttl_f, &rdata_f)) return 0;
    if (index >= PyList_GET_SIZE(t->positions) || first >= PyList_GET_SIZE(t->positions))
        return 0;
    PyObject *line = PyList_GET_ITEM(t->positions, index);
    PyObject *line_f = PyList_GET_ITEM(t->positions, first);
    int noting_first = PyDict_Contains(t->second, key);
    if (noting_first < 0) return -1;
    noting_first = !noting_first;
    int result = -1;
    PyObject *set_key = PyTuple_Pack(2, key, rtype), *record_key = PyTuple_Pack(3, key, rtype, rdata);
    PyObject *set_key_f = PyTuple_Pack(2, key, rtype_f);
    PyObject *record_key_f = PyTuple_Pack(3, key, rtype_f, rdata_f);
    PyObject *held = NULL, *held_f = NULL, *seen = NULL, *set_value = NULL, *set_value_f = NULL;
    if (!set_key || !record_key || !set_key_f || !record_key_f) goto done;
    int same_set = PyObject_RichCompareBool(set_key, set_key_f, Py_EQ);
    int same_record = PyObject_RichCompareBool(record_key, record_key_f, Py_EQ);
    if (same_set < 0 || same_record < 0) goto done;
    /* What _note(first) would find and set, then _note(index), before changing anything. */
    if (noting_first) {
        held_f = PyDict_GetItemWithError(t->rrset, set_key_f);
        if (held_f != NULL || PyErr_Occurred()) { /* noted already: the Python loop's */
            result = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        set_value_f = PyTuple_Pack(2, ttl_f, line_f);
        if (set_value_f == NULL) goto done;
    }
    held = noting_first && same_set ? Py_NewRef(set_value_f)
                                    : Py_XNewRef(PyDict_GetItemWithError(t->rrset, set_key));
    if (held == NULL && PyErr_Occurred()) goto done;
    int note_set = 0, note_record = 0;
    if (held == NULL) {
        note_set = note_record = 1;
    } else {
        int same_line = PyObject_RichCompareBool(PyTuple_GET_ITEM(held, 1), line, Py_EQ);
        if (same_line < 0) goto done;
        if (same_line) {
            note_record = 1;
        } else {
            int same_ttl = PyObject_RichCompareBool(PyTuple_GET_ITEM(held, 0), ttl, Py_EQ);
            if (same_ttl <= 0) { /* a TTL differing within its RRset: a warning */
                result = same_ttl < 0 ? -1 : 0;
                goto done;
            }
            seen = noting_first && same_record
                ? Py_NewRef(line_f) : Py_XNewRef(PyDict_GetItemWithError(t->noted, record_key));
            if (seen == NULL && PyErr_Occurred()) goto done;
            if (seen == NULL) {
                note_record = 1;
            } else {
                int same = PyObject_RichCompareBool(seen, line, Py_EQ);
                if (same <= 0) { /* the record stated twice: a warning */
                    result = same < 0 ? -1 : 0;
                    goto done;
                }
            }
        }
    }
    /* Builder._put into _ZoneParts.put's tables: the owner's records, one after another. */
    PyObject *more = PyDict_GetItemWithError(t->more, key);
    if (more == NULL) {
        PyObject *kept = PyDict_GetItemWithError(t->nodes, key);
        if (kept == NULL || !PyBytes_Check(kept)) {
            result = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        PyObject *joined = PyByteArray_FromObject(kept);
        if (joined == NULL) goto done;
        Py_ssize_t was = PyByteArray_GET_SIZE(joined), size = PyBytes_GET_SIZE(record);
        int failed = PyByteArray_Resize(joined, was + size) < 0;
        if (!failed) {
            memcpy(PyByteArray_AS_STRING(joined) + was, PyBytes_AS_STRING(record), (size_t)size);
            failed = PyDict_SetItem(t->more, key, joined) < 0 || PySet_Add(t->notable, key) < 0;
        }
        Py_DECREF(joined);
        if (failed) goto done;
    } else {
        if (!PyByteArray_Check(more)) {
            result = 0;
            goto done;
        }
        Py_ssize_t was = PyByteArray_GET_SIZE(more), size = PyBytes_GET_SIZE(record);
        if (PyByteArray_Resize(more, was + size) < 0) goto done;
        memcpy(PyByteArray_AS_STRING(more) + was, PyBytes_AS_STRING(record), (size_t)size);
    }
    /* check._note_again's notes, in its order. */
    if (noting_first && (PyDict_SetItem(t->rrset, set_key_f, set_value_f) < 0 ||
                         PyDict_SetItem(t->noted, record_key_f, line_f) < 0))
        goto done;
    int same_lines = PyObject_RichCompareBool(line_f, line, Py_EQ);
    if (same_lines < 0) goto done;
    if (!same_lines && PyDict_SetDefault(t->second, key, line) == NULL) goto done;
    if (note_set) {
        set_value = PyTuple_Pack(2, ttl, line);
        if (set_value == NULL || PyDict_SetItem(t->rrset, set_key, set_value) < 0) goto done;
    }
    if (note_record && PyDict_SetItem(t->noted, record_key, line) < 0) goto done;
    result = 1;
done:
    Py_XDECREF(set_key);
    Py_XDECREF(record_key);
    Py_XDECREF(set_key_f);
    Py_XDECREF(record_key_f);
    Py_XDECREF(held);
    Py_XDECREF(seen);
    Py_XDECREF(set_value);
    Py_XDECREF(set_value_f);
    (void)owner_f;
    return result;
}

/* records_run(records, positions, start, apex, nodes, notable, more, servable, first,
 * second, rrset, noted, undotted, tlds): take records[start:] while the check's loop would
 * add each with Builder.add_wire and note it without a finding, as that loop does (the
 * owner tables nodes, notable and more of Builder's zone at `apex`; first, second, rrset
 * and noted (record) of check._Lines; the owners found looking undotted); return the
 * index of the first record not taken. `servable`: the types add_wire has found
 * servable; `tlds`: check._TLDS. */
static PyObject *check_records_run(PyObject *module, PyObject *args) {
    (void)module;
    Tables t;
    PyObject *servable, *tlds;
    Py_ssize_t start, apex_len;
    const unsigned char *apex;
    if (!PyArg_ParseTuple(args, "O!O!ny#O!O!O!O!O!O!O!O!O!O!", &PyList_Type, &t.records,
                          &PyList_Type, &t.positions, &start, &apex, &apex_len, &PyDict_Type,
                          &t.nodes, &PySet_Type, &t.notable, &PyDict_Type, &t.more, &PySet_Type,
                          &servable, &PyDict_Type, &t.first, &PyDict_Type, &t.second,
                          &PyDict_Type, &t.rrset, &PyDict_Type, &t.noted, &PySet_Type,
                          &t.undotted, &PyFrozenSet_Type, &tlds))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(t.records);
    Py_ssize_t short_below = apex_len - 1;
    Py_ssize_t index = start < 0 ? 0 : start;
    for (; index < count; index++) {
        PyObject *owner, *rtype_obj, *ttl_obj, *rdata;
        if (!fields(t.records, index, &owner, &rtype_obj, &ttl_obj, &rdata)) break;
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
        lower((const unsigned char *)PyBytes_AS_STRING(owner), len, key);
        if (!at_or_below(key, len, apex, apex_len)) break;
        Py_ssize_t at = name_at(rtype);
        if (at >= 0) { /* check._target, lowercased, never looking undotted */
            unsigned char target[MAX_NAME];
            Py_ssize_t n = target_name((const unsigned char *)PyBytes_AS_STRING(rdata), size,
                                       at, target);
            if (n < 0) break; /* no whole name there: the Python loop's */
            if (looks_undotted(target, n, apex, apex_len, tlds) != 0) break;
        }
        PyObject *owner_key = PyBytes_FromStringAndSize((const char *)key, len);
        if (owner_key == NULL) return NULL;
        PyObject *first = PyDict_GetItemWithError(t.first, owner_key);
        if (first == NULL && PyErr_Occurred()) {
            Py_DECREF(owner_key);
            return NULL;
        }
        PyObject *held = wire_record(rtype, ttl, rdata);
        int taken = held == NULL ? -1 : 0;
        if (held != NULL && first != NULL) {
            taken = again(&t, owner_key, first, index, rtype_obj, ttl_obj, rdata, held);
        } else if (held != NULL) {
            /* check_zone_text: an owner one label below the apex looks undotted only when
             * that label is longer than the apex (its labels written twice). */
            Py_ssize_t below = len - apex_len;
            found = PyDict_Contains(t.nodes, owner_key);
            if (found == 0 && !((below != key[0] + 1 || below >= short_below) &&
                                looks_undotted(key, len, apex, apex_len, tlds) != 0)) {
                PyObject *position = PyLong_FromSsize_t(index);
                taken = position == NULL || PyDict_SetItem(t.nodes, owner_key, held) < 0 ||
                                ((rtype == T_NS || rtype == T_SOA || rtype == T_DNAME) &&
                                 PySet_Add(t.notable, owner_key) < 0) ||
                                PyDict_SetItem(t.first, owner_key, position) < 0
                            ? -1 : 1;
                Py_XDECREF(position);
            } else if (found < 0) {
                taken = -1;
            }
        }
        Py_XDECREF(held);
        Py_DECREF(owner_key);
        if (taken < 0) return NULL;
        if (taken == 0) break;
    }
    return PyLong_FromSsize_t(index);
}


/* ---- clean_count: a whole file proven free of findings, without the owner tables ---- */

enum { T_A = 1, T_AAAA = 28, T_DS = 43, T_RRSIG = 46, T_NSEC = 47, T_OPT = 41 };
enum { HAS_SOA = 1, HAS_NS = 2, HAS_ADDRESS = 4, HAS_CNAME = 8, HAS_DS = 16,
       HAS_NOT_BESIDE_CNAME = 32 };

typedef struct {
    const unsigned char *rdata;
    Py_ssize_t size, next; /* the owner's next record, or -1 */
    long long ttl;
    long rtype;
} CleanRecord;

typedef struct {
    Py_ssize_t name, len; /* the lowercased name, at `name` in the arena */
    Py_ssize_t first, count, soas, cnames;
    unsigned flags;
} CleanOwner;

typedef struct {
    uint32_t tag, owner; /* the hash's high half; the owner's index + 1, 0 for empty */
} Slot;

typedef struct {
    CleanRecord *records;
    CleanOwner *owners;
    Py_ssize_t owner_count;
    unsigned char *arena;
    Slot *slots; /* by hash */
    size_t mask;
} Clean;

static size_t name_hash(const unsigned char *name, Py_ssize_t len) {
    size_t hash = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < len; i++) hash = (hash ^ name[i]) * 1099511628211ULL;
    return hash;
}

/* The slot of `name` (lowercased): its owner's, or the empty one to put it in (its tag
 * set). The tag spares most probes a look at an owner elsewhere in memory. */
static Slot *owner_slot(const Clean *c, const unsigned char *name, Py_ssize_t len) {
    size_t hash = name_hash(name, len), at = hash & c->mask;
    uint32_t tag = (uint32_t)(hash >> 32);
    for (;;) { /* bounded: the table is never more than half full */
        Slot *slot = &c->slots[at];
        if (slot->owner == 0) {
            slot->tag = tag;
            return slot;
        }
        if (slot->tag == tag) {
            const CleanOwner *o = &c->owners[slot->owner - 1];
            if (o->len == len && memcmp(c->arena + o->name, name, (size_t)len) == 0) return slot;
        }
        at = (at + 1) & c->mask;
    }
}

static const CleanOwner *owner_of(const Clean *c, const unsigned char *name, Py_ssize_t len) {
    const Slot *slot = owner_slot(c, name, len);
    return slot->owner ? &c->owners[slot->owner - 1] : NULL;
}

static int by_type_and_rdata(const void *a, const void *b) {
    const CleanRecord *x = *(const CleanRecord *const *)a, *y = *(const CleanRecord *const *)b;
    if (x->rtype != y->rtype) return x->rtype < y->rtype ? -1 : 1;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    return memcmp(x->rdata, y->rdata, (size_t)x->size);
}

/* Whether an owner's records bring no finding among themselves (no TTL differing within
 * an RRset, no record stated twice): `sorted` has room for its records. */
static int owner_records_clean(const Clean *c, const CleanOwner *o, CleanRecord **sorted) {
    Py_ssize_t n = 0;
    for (Py_ssize_t r = o->first; r >= 0; r = c->records[r].next) sorted[n++] = &c->records[r];
    qsort(sorted, (size_t)n, sizeof *sorted, by_type_and_rdata);
    for (Py_ssize_t i = 1; i < n; i++) {
        if (sorted[i]->rtype != sorted[i - 1]->rtype) continue;
        if (sorted[i]->ttl != sorted[i - 1]->ttl || by_type_and_rdata(&sorted[i], &sorted[i - 1]) == 0)
            return 0;
    }
    return 1;
}

/* Whether every in-zone name server an NS record of `o` names has the address the check
 * looks for (check._NameServers.warn; a server named only by a wildcard is left to it). */
static int servers_clean(const Clean *c, const CleanOwner *o, const unsigned char *apex,
                         Py_ssize_t apex_len) {
    for (Py_ssize_t r = o->first; r >= 0; r = c->records[r].next) {
        const CleanRecord *record = &c->records[r];
        if (record->rtype != T_NS) continue;
        unsigned char server[MAX_NAME];
        Py_ssize_t n = target_name(record->rdata, record->size, 0, server);
        if (n < 0) return 0;
        if (!at_or_below(server, n, apex, apex_len)) continue; /* resolved elsewhere */
        const CleanOwner *cut = NULL;
        for (Py_ssize_t at = 0; n - at != apex_len; at += server[at] + 1) {
            const CleanOwner *above = owner_of(c, server + at, n - at);
            if (above != NULL && (above->flags & HAS_NS)) {
                cut = above;
                break;
            }
        }
        if (cut != NULL && cut != o) continue; /* beneath another delegation: checked there */
        const CleanOwner *held = owner_of(c, server, n);
        if (held == NULL || !(held->flags & HAS_ADDRESS)) return 0;
    }
    return 1;
}

/* clean_count(records, arena, apex, tlds): the record count check_zone_text gives a file
 * whose records (read without a problem into a RecordTable: its `records` and `arena`)
 * bring no error and no warning, or -1 when this does not prove that (the check then
 * judges the file whole): what the Python loop and the freeze would do, on tables of C
 * structs rather than Python objects. */
static PyObject *check_clean_count(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer table, octets;
    PyObject *tlds;
    const unsigned char *apex;
    Py_ssize_t apex_len;
    if (!PyArg_ParseTuple(args, "y*y*y#O!", &table, &octets, &apex, &apex_len,
                          &PyFrozenSet_Type, &tlds))
        return NULL;
    const TableRecord *read = table.buf;
    const unsigned char *arena = octets.buf;
    Py_ssize_t count = table.len / (Py_ssize_t)sizeof(TableRecord), verdict = -1, names = 0;
    for (Py_ssize_t i = 0; i < count; i++) names += read[i].owner_len;
    size_t slots = 4;
    while (slots < (size_t)count * 2 + 2) slots <<= 1;
    Clean c = {PyMem_Calloc((size_t)count + 1, sizeof(CleanRecord)),
               PyMem_Calloc((size_t)count + 1, sizeof(CleanOwner)), 0,
               PyMem_Malloc((size_t)names + 1), PyMem_Calloc(slots, sizeof(Slot)), slots - 1};
    CleanRecord **sorted = PyMem_Calloc((size_t)count + 1, sizeof(CleanRecord *));
    if (!c.records || !c.owners || !c.slots || !sorted || !c.arena) {
        PyErr_NoMemory();
        goto unproven;
    }
    if (count >= INT32_MAX || table.len % (Py_ssize_t)sizeof(TableRecord)) goto unproven;
    Py_ssize_t used = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const TableRecord *r = &read[i];
        long rtype = r->rtype;
        long long ttl = r->ttl;
        Py_ssize_t len = r->owner_len, size = r->rdata_len;
        if (r->owner < 0 || r->rdata < 0 || len < 0 || size < 0 || r->owner + len > octets.len ||
            r->rdata + size > octets.len)
            goto unproven;
        const unsigned char *data = arena + r->rdata;
        /* add_wire's refusals (unservable types: 0, OPT, the meta range), DNAME's rules
         * (left to the check), _put's ranges */
        if (rtype <= 0 || rtype > 0xFFFF || rtype == T_OPT || (rtype >= 128 && rtype <= 255) ||
            rtype == T_DNAME || ttl < 0 || ttl > MAX_TTL || size > MAX_RDATA || len > MAX_NAME ||
            len > names - used)
            goto unproven;
        unsigned char *key = c.arena + used;
        lower(arena + r->owner, len, key);
        if (!at_or_below(key, len, apex, apex_len)) goto unproven;
        Py_ssize_t at = name_at(rtype);
        if (at >= 0) {
            unsigned char target[MAX_NAME];
            Py_ssize_t n = target_name(data, size, at, target);
            if (n < 0 || looks_undotted(target, n, apex, apex_len, tlds) != 0) goto unproven;
        }
        Slot *slot = owner_slot(&c, key, len);
        if (slot->owner == 0) {
            if (looks_undotted(key, len, apex, apex_len, tlds) != 0) goto unproven;
            c.owners[c.owner_count] = (CleanOwner){used, len, -1, 0, 0, 0, 0};
            slot->owner = (uint32_t)++c.owner_count;
            used += len;
        }
        CleanOwner *o = &c.owners[slot->owner - 1];
        c.records[i] = (CleanRecord){data, size, o->first, ttl, rtype};
        o->first = i;
        o->count++;
        switch (rtype) {
        case T_SOA: o->flags |= HAS_SOA; o->soas++; break;
        case T_NS: o->flags |= HAS_NS; break;
        case T_A: case T_AAAA: o->flags |= HAS_ADDRESS; break;
        case T_CNAME: o->flags |= HAS_CNAME; o->cnames++; break;
        case T_DS: o->flags |= HAS_DS; break;
        }
        if (rtype != T_CNAME && rtype != T_RRSIG && rtype != T_NSEC)
            o->flags |= HAS_NOT_BESIDE_CNAME;
    }
    const CleanOwner *top = owner_of(&c, apex, apex_len);
    /* check_apex: an SOA and NS at the apex; no DS there (a warning) */
    if (top == NULL || !(top->flags & HAS_SOA) || !(top->flags & HAS_NS) ||
        (top->flags & HAS_DS))
        goto unproven;
    for (Py_ssize_t k = 0; k < c.owner_count; k++) {
        const CleanOwner *o = &c.owners[k];
        /* build._check_node: one SOA, at the apex only; a CNAME alone but for RRSIG/NSEC */
        if ((o->flags & HAS_SOA) && (o != top || o->soas != 1)) goto unproven;
        if ((o->flags & HAS_CNAME) && ((o->flags & HAS_NOT_BESIDE_CNAME) || o->cnames != 1))
            goto unproven;
        if (o->count > 1 && !owner_records_clean(&c, o, sorted)) goto unproven;
        if ((o->flags & HAS_NS) && !servers_clean(&c, o, apex, apex_len)) goto unproven;
    }
    verdict = count;
unproven:
    PyBuffer_Release(&table);
    PyBuffer_Release(&octets);
    PyMem_Free(c.records);
    PyMem_Free(c.owners);
    PyMem_Free(c.arena);
    PyMem_Free(c.slots);
    PyMem_Free(sorted);
    return PyErr_Occurred() ? NULL : PyLong_FromSsize_t(verdict);
}

static PyMethodDef check_methods[] = {
    {"records_run", check_records_run, METH_VARARGS,
     "records_run(records, positions, start, apex, nodes, notable, more, servable, first, "
     "second, rrset, noted, undotted, tlds)"},
    {"clean_count", check_clean_count, METH_VARARGS, "clean_count(records, arena, apex, tlds)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef check_module = {
    PyModuleDef_HEAD_INIT, "_check", "The compiled run of the zone check's loop over records.",
    -1, check_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__check(void) { return PyModule_Create(&check_module); }
