/* The compiled UDP fast path (valis_core.dns.answer._fastpath): see fastpath.py for the why.
 *
 * Two types (and a TCP section at the end: `stream_serve`, one connection's queries):
 *
 * - Table: the encoded responses of one holder's snapshots, keyed by the question as
 *   _answer.py keys its response cache (the question name lowercased, then the type),
 *   each the same entry (message.Entry) the Python path keeps. Python fills it; C reads
 *   it. Bounded: at `limit` entries it is emptied and fills again. A swap replaces only
 *   the zones it changed (`drop`, `zone`, `enclosing`): each zone has a generation, each
 *   entry remembers the generations of the zones it was read from (`put`'s deps), and an
 *   entry one of them moved past is a miss.
 * - Pump: one UDP socket's batch. `drain` takes up to `batch` datagrams with one
 *   recvmmsg, answers in C each the table can answer that takes the plain path (class
 *   IN, at most one OPT of version 0, no TSIG, ...), and hands the rest back;
 *   `reply` queues Python's responses beside C's; `flush` sends them all with sendmmsg
 *   and counts what was sent.
 *
 * What C answers is byte for byte what _answer.py's `_assemble` builds from the same
 * entry; everything else goes to Python, which stays the reference (the property test
 * tests/property/test_fastpath.py compares the two). On a node signing some zones C
 * answers only the questions the signer leaves to the unsigned path (`unsigned_path`).
 * `Pump.drain` releases the GIL around the two system calls only. `Pump.serve` (a
 * worker thread's drain, fastpath.py) answers the table's hits with the GIL released,
 * which is why every change to a table is a write under the readers' lock below
 * (`read_lock_until`, `write_begin`): a worker reads the table only inside a batch it holds
 * the lock for, and a writer (the one Python thread that fills tables and swaps
 * snapshots, holding the GIL) waits until no batch reads, changes the table, and lets
 * them go on. A retired table (`Table.retire`: a swap made a new one) answers nothing
 * more in a worker, which then asks Python for the new one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_DATAGRAM 65535
#define MAX_BATCH 1024
#define MAX_NAME 255
#define MAX_LABEL 63
#define KEY_MAX (MAX_NAME + 2)
#define SERVER_PAYLOAD 1232
#define PLAIN_UDP_LIMIT 512
#define OPT_SIZE 11
#define MAX_OPTIONS 64 /* message.py's MAX_OPTIONS */
#define RCODES 16

#define F_QR 0x8000
#define F_OPCODE 0x7800
#define F_TC 0x0200
#define F_ECHOED 0x0110 /* RD | CD */
#define T_OPT 41
#define T_IXFR 251
#define T_AXFR 252

/* Where each field of an answer entry sits (message.Entry, the tuple Python keeps in its
 * response cache and hands to put and negative; message.ENTRY_FIELDS names them). These,
 * and the values above, copy the Python path's: tests/property/test_fastpath_constants.py
 * holds them equal. */
enum {
    E_FLAGS = 0,
    E_AN = 1,
    E_NS = 2,
    E_AR = 3,
    E_BODY = 4,
    E_SHORT_AR = 5,
    E_SHORT_BODY = 6,
    E_FIELDS = 7
};

/* --- the table ------------------------------------------------------------------- */

/* What an entry was read from: up to SLOT_DEPS zones (by index), "no served zone" (a
 * lookup that found none), or when there were more, any change at all. */
#define SLOT_DEPS 2
enum { DEP_NONE = -1, DEP_ROOT = -2, DEP_ANY = -3 };

/* What an entry read inside the one zone it was read from, when Python knows it
 * (_cache.untouched): the key_hash of each name it read and of each ancestor of those
 * beneath the apex, up to SLOT_READS of them. A zone moved on by patches that changed
 * none of them keeps the entry (`moved`); more of them, or none known: it does not. */
#define SLOT_READS 6

typedef struct {
    uint32_t hash; /* 0: empty */
    uint16_t key_len;
    uint16_t flags, an, ns, ar, short_ar;
    unsigned char *key;
    PyObject *body;       /* bytes, owned */
    PyObject *short_body; /* bytes or NULL, owned */
    int32_t dep[SLOT_DEPS]; /* a zone's index, or DEP_*; DEP_NONE ends the list */
    uint64_t gen[SLOT_DEPS]; /* its generation when the entry was put */
    uint32_t reads[SLOT_READS]; /* what it read in its one zone (key_hash of each name) */
    uint8_t nreads;             /* how many; 0: not known, stale at any move of its zone */
    uint8_t kept; /* gen[0] is its zone's `kept` (it has reads), not its `gen`; 0 there:
                     a move changed a name it read */
} Slot;

/* The slots that read a name (by key_hash), for `moved` to find those a change touched
 * without walking the table: one bucket per hash, each a growing list of slot indices.
 * A listed slot may since hold another entry, or no longer read the name: `moved` checks
 * each. */
typedef struct {
    uint32_t hash;
    uint32_t count, room; /* room 0: the bucket is empty */
    uint32_t *slots;
} ReadBucket;

/* A negative answer (_lookup.py's `negative_entry`): the zone's SOA, for one RCODE and one
 * offset of the apex in the question. body NULL: not known yet. */
typedef struct {
    uint16_t flags, an, ns, ar;
    PyObject *body;
} Negative;

/* A served zone as the negative path reads it: ServedZone's own tables, each the shards
 * of a persistent owner table (zone/owners.py: a tuple of 2**k dicts, a key in shard
 * hash(key) & (2**k - 1); a set's dicts hold None), read with shard_get. */
typedef struct {
    unsigned char *apex;
    size_t apex_len;
    PyObject *nodes;      /* shards: owner -> records; NULL: Python answers this zone */
    PyObject *ents;       /* shards: the empty non-terminals */
    PyObject *interrupts; /* shards: delegation points and DNAME owners, or NULL */
    int wildcard;
    int signing;          /* UNSIGNED, SIGNED, or SIGNED_ELSEWHERE (no key here) */
    Negative *negatives;  /* [2][MAX_NAME + 1]: NODATA then NXDOMAIN, by offset; NULL
                             until the zone's first negative answer is learnt */
    uint64_t gen;         /* moved on whenever the zone (or what lies beneath it) changes */
    uint64_t kept;        /* what the entries with reads (Slot.kept) compare: moved on as
                             gen, but not by `moved`, which marks the touched ones instead */
    size_t reading;       /* entries put with reads in it since the table was last emptied
                             (never fewer than those held): none, and `moved` walks no slot */
    int gone;             /* dropped: found by no lookup; its index kept, so that entries
                             read from it stay stale if it comes back */
} Zone;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t mask;
    Py_ssize_t count;
    Py_ssize_t limit;
    Zone *zones;
    size_t zone_count;
    size_t zone_room;
    int32_t *apexes; /* open addressing over zones: index + 1, 0 empty */
    size_t apex_mask;
    int signing; /* some zone is not UNSIGNED: every question's zone is looked up */
    uint64_t stamp;    /* the last generation given out: moves on at every change */
    uint64_t root_gen; /* moved on when a zone is added or dropped beneath no other */
    int retired;       /* a newer table answers for its holder: workers take no answer */
    ReadBucket *readers; /* the slots that read each name (ReadBucket), or NULL */
    size_t readers_mask;
    size_t readers_used, readers_listed; /* buckets taken; slot indices listed */
    int readers_lost; /* a slot read a name not listed (full, or no memory): `moved`
                         walks every slot until the table is next emptied */
} TableObject;

/* --- the readers' lock ----------------------------------------------------------- */

/* One lock for every table of the process, at batch granularity. Readers are worker
 * threads without the GIL (`read_lock_until` for the lookups of one batch; never across a
 * system call, and never while waiting for the GIL) or with it (`read_trylock`: a
 * worker holding the GIL must not wait for a writer, who may need the GIL to finish).
 * The writer holds the GIL: `write_begin` raises the flag and waits for the readers of
 * the batches under way (microseconds), `write_end` lowers it. Writes nest (a swap's
 * several changes are one write, fastpath.writing); the depth is the GIL's, so the
 * flag may be lowered by another GIL holder than raised it, which a pthread lock would
 * not allow. Sequentially consistent atomics: a reader counts itself in and then looks
 * for the flag, the writer raises the flag and then counts the readers, so one of the
 * two always sees the other. */
static atomic_int lock_readers;
static atomic_int lock_writer;
static long write_depth; /* guarded by the GIL */

static long long monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Whether the read lock was taken before `deadline` (monotonic_ns): a worker waits for
 * a write under way no longer than its budget, and then hands its batch to Python. */
static int read_lock_until(long long deadline) {
    for (unsigned spins = 1;; spins++) {
        if (!atomic_load(&lock_writer)) {
            atomic_fetch_add(&lock_readers, 1);
            if (!atomic_load(&lock_writer)) return 1;
            atomic_fetch_sub(&lock_readers, 1);
        }
        if (spins % 64 == 0 && monotonic_ns() >= deadline) return 0;
        sched_yield();
    }
}

static int read_trylock(void) {
    if (atomic_load(&lock_writer)) return 0;
    atomic_fetch_add(&lock_readers, 1);
    if (!atomic_load(&lock_writer)) return 1;
    atomic_fetch_sub(&lock_readers, 1);
    return 0;
}

static void read_unlock(void) { atomic_fetch_sub(&lock_readers, 1); }

static void write_begin(void) {
    if (write_depth++) return;
    atomic_store(&lock_writer, 1);
    while (atomic_load(&lock_readers)) sched_yield();
}

static void write_end(void) {
    if (--write_depth) return;
    atomic_store(&lock_writer, 0);
}

/* How a zone is signed, as signed.Signer holds it: not at all; online with a key
 * (DO=1 and the apex's key records are the signer's); or without the key here (the
 * signer answers it SERVFAIL). */
enum { UNSIGNED = 0, SIGNED = 1, SIGNED_ELSEWHERE = 2 };

static uint32_t key_hash(const unsigned char *key, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= key[i];
        h *= 16777619u;
    }
    return h ? h : 1;
}

static void table_empty(TableObject *t) {
    if (t->slots == NULL) return;
    for (size_t i = 0; i <= t->mask; i++) {
        Slot *s = &t->slots[i];
        if (!s->hash) continue;
        PyMem_Free(s->key);
        Py_CLEAR(s->body);
        Py_CLEAR(s->short_body);
        s->hash = 0;
        s->kept = 0; /* its reads are listed no more */
    }
    t->count = 0;
    for (size_t z = 0; z < t->zone_count; z++) t->zones[z].reading = 0;
    if (t->readers != NULL) {
        for (size_t i = 0; i <= t->readers_mask; i++) PyMem_Free(t->readers[i].slots);
        memset(t->readers, 0, (t->readers_mask + 1) * sizeof(ReadBucket));
    }
    t->readers_used = t->readers_listed = 0;
    t->readers_lost = 0;
}

/* The bucket of `hash` (an empty one if it has none), or NULL. */
static ReadBucket *readers_of(const TableObject *t, uint32_t hash) {
    if (t->readers == NULL) return NULL;
    size_t i = hash & t->readers_mask;
    for (size_t probes = 0; probes <= t->readers_mask; probes++) {
        ReadBucket *b = &t->readers[i];
        if (!b->room || b->hash == hash) return b;
        i = (i + 1) & t->readers_mask;
    }
    return NULL;
}

/* List slot `at` among the readers of `hash`; when it cannot be listed (more names or
 * listings than the table's size allows, or no memory), `moved` walks every slot. */
static void readers_note(TableObject *t, uint32_t hash, size_t at) {
    if (t->readers_lost) return;
    if (t->readers == NULL) {
        t->readers = PyMem_Calloc(t->mask + 1, sizeof(ReadBucket));
        if (t->readers == NULL) {
            t->readers_lost = 1;
            return;
        }
        t->readers_mask = t->mask;
    }
    ReadBucket *b = readers_of(t, hash);
    if (b == NULL || t->readers_listed >= (size_t)t->limit * SLOT_READS ||
        (!b->room && (t->readers_used + 1) * 2 > t->readers_mask + 1)) {
        t->readers_lost = 1;
        return;
    }
    if (b->count == b->room) {
        uint32_t room = b->room ? b->room * 2 : 2;
        uint32_t *slots = PyMem_Realloc(b->slots, room * sizeof(uint32_t));
        if (slots == NULL) {
            t->readers_lost = 1;
            return;
        }
        if (!b->room) {
            b->hash = hash;
            t->readers_used++;
        }
        b->slots = slots;
        b->room = room;
    }
    b->slots[b->count++] = (uint32_t)at;
    t->readers_listed++;
}

static Slot *table_find(TableObject *t, const unsigned char *key, size_t len, uint32_t h) {
    size_t i = h & t->mask;
    for (size_t probes = 0; probes <= t->mask; probes++) {
        Slot *s = &t->slots[i];
        if (!s->hash) return s;
        if (s->hash == h && s->key_len == len && memcmp(s->key, key, len) == 0) return s;
        i = (i + 1) & t->mask;
    }
    return NULL; /* unreachable: the table is never more than half full */
}

static void zones_empty(TableObject *t) {
    for (size_t z = 0; z < t->zone_count; z++) {
        Zone *zone = &t->zones[z];
        PyMem_Free(zone->apex);
        Py_CLEAR(zone->nodes);
        Py_CLEAR(zone->ents);
        Py_CLEAR(zone->interrupts);
        if (zone->negatives != NULL) {
            for (size_t i = 0; i < 2 * (MAX_NAME + 1); i++) Py_CLEAR(zone->negatives[i].body);
            PyMem_Free(zone->negatives);
        }
    }
    PyMem_Free(t->zones);
    PyMem_Free(t->apexes);
    t->zones = NULL;
    t->apexes = NULL;
    t->zone_count = t->zone_room = 0;
    t->apex_mask = 0;
    t->signing = 0;
}

/* The zone whose apex is `name` (`len` bytes, lowercased wire form), served or dropped,
 * or -1. */
static long zone_held(const TableObject *t, const unsigned char *name, size_t len) {
    if (t->apexes == NULL) return -1;
    size_t i = key_hash(name, len) & t->apex_mask;
    for (size_t probes = 0; probes <= t->apex_mask; probes++) {
        int32_t held = t->apexes[i];
        if (!held) return -1;
        const Zone *zone = &t->zones[held - 1];
        if (zone->apex_len == len && memcmp(zone->apex, name, len) == 0) return held - 1;
        i = (i + 1) & t->apex_mask;
    }
    return -1;
}

/* The served zone whose apex is `name`, or -1. */
static long zone_at(const TableObject *t, const unsigned char *name, size_t len) {
    long z = zone_held(t, name, len);
    return z >= 0 && t->zones[z].gone ? -1 : z;
}

static int apexes_rebuild(TableObject *t) {
    size_t capacity = 8;
    while (capacity < t->zone_count * 2) capacity <<= 1;
    int32_t *apexes = PyMem_Calloc(capacity, sizeof(int32_t));
    if (apexes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t z = 0; z < t->zone_count; z++) {
        size_t i = key_hash(t->zones[z].apex, t->zones[z].apex_len) & (capacity - 1);
        while (apexes[i]) i = (i + 1) & (capacity - 1);
        apexes[i] = (int32_t)z + 1;
    }
    PyMem_Free(t->apexes);
    t->apexes = apexes;
    t->apex_mask = capacity - 1;
    return 0;
}

/* Whether `name` is a whole wire name of at most MAX_NAME bytes. */
static int wire_name(const unsigned char *name, size_t len) {
    if (len < 1 || len > MAX_NAME) return 0;
    size_t i = 0;
    while (i < len && name[i]) {
        if (name[i] > MAX_LABEL) return 0;
        i += name[i] + 1;
    }
    return i == len - 1;
}

/* Whether `shards` is an owner table's shards: a tuple of 2**k dicts (k >= 0). */
static int owner_shards(PyObject *shards) {
    if (!PyTuple_CheckExact(shards)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(shards);
    if (n < 1 || (n & (n - 1))) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyDict_CheckExact(PyTuple_GET_ITEM(shards, i))) return 0;
    return 1;
}

/* `key`'s value in an owner table's shards (borrowed), or NULL: not held, or an error
 * (set). The hash is Python's own (cached in a bytes object), so the shard is the one
 * zone/owners.py put the key in. */
static PyObject *shard_get(PyObject *shards, PyObject *key) {
    Py_hash_t hash = PyObject_Hash(key);
    if (hash == -1) return NULL;
    size_t mask = (size_t)PyTuple_GET_SIZE(shards) - 1;
    return PyDict_GetItemWithError(PyTuple_GET_ITEM(shards, (size_t)hash & mask), key);
}

static int shard_has(PyObject *shards, PyObject *key) {
    if (shard_get(shards, key) != NULL) return 1;
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *Table_zone(TableObject *self, PyObject *args) {
    Py_buffer apex;
    PyObject *nodes, *ents, *interrupts;
    int wildcard, signing = UNSIGNED;
    if (self->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the table was not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*OOOp|i", &apex, &nodes, &ents, &interrupts, &wildcard,
                          &signing))
        return NULL;
    PyObject *result = NULL;
    if (signing < UNSIGNED || signing > SIGNED_ELSEWHERE) {
        PyErr_SetString(PyExc_ValueError, "a zone's signing is 0 (unsigned), 1 (signed) or "
                                          "2 (signed without its key here)");
        goto done;
    }
    if (!wire_name(apex.buf, (size_t)apex.len)) {
        PyErr_SetString(PyExc_ValueError, "an apex is a lowercased wire name");
        goto done;
    }
    if ((nodes != Py_None && !owner_shards(nodes)) || !owner_shards(ents) ||
        (interrupts != Py_None && !owner_shards(interrupts))) {
        PyErr_SetString(PyExc_TypeError,
                        "a zone is the shards (a tuple of 2**k dicts) of its nodes (or None), "
                        "of its empty non-terminals and of its delegation and DNAME owners "
                        "(or None)");
        goto done;
    }
    if (zone_at(self, apex.buf, (size_t)apex.len) >= 0) {
        PyErr_SetString(PyExc_ValueError, "this zone is known already");
        goto done;
    }
    long dropped = zone_held(self, apex.buf, (size_t)apex.len);
    if (dropped >= 0) { /* back after a drop: its index again, a new generation */
        Zone *back = &self->zones[dropped];
        back->nodes = nodes == Py_None ? NULL : Py_NewRef(nodes);
        back->ents = Py_NewRef(ents);
        back->interrupts = interrupts == Py_None ? NULL : Py_NewRef(interrupts);
        back->wildcard = wildcard;
        back->signing = signing;
        back->gen = back->kept = ++self->stamp;
        back->gone = 0;
        if (signing != UNSIGNED) self->signing = 1;
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (self->zone_count == self->zone_room) {
        size_t room = self->zone_room ? self->zone_room * 2 : 8;
        Zone *zones = PyMem_Realloc(self->zones, room * sizeof(Zone));
        if (zones == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        self->zones = zones;
        self->zone_room = room;
    }
    Zone *zone = &self->zones[self->zone_count];
    memset(zone, 0, sizeof(*zone));
    zone->apex = PyMem_Malloc((size_t)apex.len);
    if (zone->apex == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(zone->apex, apex.buf, (size_t)apex.len);
    zone->apex_len = (size_t)apex.len;
    zone->nodes = nodes == Py_None ? NULL : Py_NewRef(nodes);
    zone->ents = Py_NewRef(ents);
    zone->interrupts = interrupts == Py_None ? NULL : Py_NewRef(interrupts);
    zone->wildcard = wildcard;
    zone->signing = signing;
    zone->gen = zone->kept = ++self->stamp;
    self->zone_count++;
    if (self->apexes == NULL || self->zone_count * 2 > self->apex_mask + 1) {
        if (apexes_rebuild(self) < 0) { /* doubled: amortised O(1) a zone */
            self->zone_count--; /* never a zone C cannot find: it would answer for it */
            PyMem_Free(zone->apex);
            Py_CLEAR(zone->nodes);
            Py_CLEAR(zone->ents);
            Py_CLEAR(zone->interrupts);
            goto done;
        }
    } else {
        size_t i = key_hash(zone->apex, zone->apex_len) & self->apex_mask;
        while (self->apexes[i]) i = (i + 1) & self->apex_mask;
        self->apexes[i] = (int32_t)(self->zone_count - 1) + 1;
    }
    if (signing != UNSIGNED) self->signing = 1;
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&apex);
    return result;
}

/* Forget a served zone (a swap dropped it, or replaces it: `zone` then gives its new
 * version): lookups no longer find it, and every entry read from it is stale. */
static PyObject *Table_drop(TableObject *self, PyObject *arg) {
    Py_buffer apex;
    if (PyObject_GetBuffer(arg, &apex, PyBUF_SIMPLE) < 0) return NULL;
    long z = zone_at(self, apex.buf, (size_t)apex.len);
    PyBuffer_Release(&apex);
    if (z < 0) {
        PyErr_SetString(PyExc_KeyError, "no such zone in this table");
        return NULL;
    }
    Zone *zone = &self->zones[z];
    zone->gone = 1;
    zone->gen = zone->kept = ++self->stamp;
    Py_CLEAR(zone->nodes);
    Py_CLEAR(zone->ents);
    Py_CLEAR(zone->interrupts);
    if (zone->negatives != NULL) {
        for (size_t i = 0; i < 2 * (MAX_NAME + 1); i++) Py_CLEAR(zone->negatives[i].body);
        PyMem_Free(zone->negatives);
        zone->negatives = NULL;
    }
    Py_RETURN_NONE;
}

/* A zone was added or dropped at `apex`: the names beneath it were (or are now) the
 * nearest enclosing zone's, so the entries read from that zone are stale; with none
 * above it, those that found no zone. */
static PyObject *Table_enclosing(TableObject *self, PyObject *arg) {
    Py_buffer apex;
    if (PyObject_GetBuffer(arg, &apex, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *name = apex.buf;
    size_t len = (size_t)apex.len;
    if (!wire_name(name, len)) {
        PyBuffer_Release(&apex);
        PyErr_SetString(PyExc_ValueError, "an apex is a lowercased wire name");
        return NULL;
    }
    long above = -1;
    for (size_t i = 0; name[i] && above < 0;) {
        i += name[i] + 1;
        above = zone_at(self, name + i, len - i);
    }
    PyBuffer_Release(&apex);
    if (above >= 0) self->zones[above].gen = self->zones[above].kept = ++self->stamp;
    else self->root_gen = ++self->stamp;
    Py_RETURN_NONE;
}

/* Whether slot `s` holds an entry read from zone `z` alone, fresh by its reads, that
 * read a name of hash `hash`. */
static int slot_reads(const Slot *s, long z, const Zone *zone, uint32_t hash) {
    if (!s->hash || !s->kept || s->dep[0] != (int32_t)z || s->gen[0] != zone->kept) return 0;
    for (int r = 0; r < s->nreads; r++)
        if (s->reads[r] == hash) return 1;
    return 0;
}

/* Whether slot `s`'s answer may hold an SOA record: an answer with records in its
 * authority section (a negative answer's SOA), with none in its answer section, or to a
 * question of type SOA or ANY. Any other (an answer section of the type asked, or a
 * chain to it, and nothing in authority) holds none: no SOA is ever additional data. */
static int slot_may_hold_soa(const Slot *s) {
    if (s->ns || !s->an || s->key_len < 2) return 1;
    unsigned qtype = (unsigned)s->key[s->key_len - 2] << 8 | s->key[s->key_len - 1];
    return qtype == 6 || qtype == 255;
}

/* Whether a move marks slot `s` stale for reading the name of `hash`: the name is among
 * the changed owners, or among those whose SOA alone changed and the answer may hold
 * it. */
static int slot_touched(const Slot *s, long z, const Zone *zone, uint32_t hash, int soa_only) {
    return slot_reads(s, z, zone, hash) && (!soa_only || slot_may_hold_soa(s));
}

/* A served zone moved on by patches that changed the owners `changed` (a tuple of
 * names), and `soa_only` (names too, their SOA record all that changed: the apex whose
 * serial a change raised): its new tables replace the old, its negative answers are
 * forgotten (the SOA moved), and of the entries read from it alone at its last version
 * those whose reads (`put`) name none of the changed owners, and none of `soa_only` but
 * with an answer that cannot hold an SOA (`slot_may_hold_soa`), are kept (Slot.kept:
 * they compare the zone's `kept`, which a move leaves as it was); the others that read
 * one are marked stale, found through the readers of each owner: O(changed), whatever
 * the zone's or the table's size (a walk of every slot when the readers are not all
 * listed). Every other entry read from it is stale (its `gen` moves on). */
static PyObject *Table_moved(TableObject *self, PyObject *args) {
    Py_buffer apex;
    PyObject *nodes, *ents, *interrupts, *changed, *soa = NULL;
    int wildcard;
    if (self->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the table was not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*OOOpO!|O!", &apex, &nodes, &ents, &interrupts, &wildcard,
                          &PyTuple_Type, &changed, &PyTuple_Type, &soa))
        return NULL;
    PyObject *result = NULL;
    uint32_t *hashes = NULL;
    long z = zone_at(self, apex.buf, (size_t)apex.len);
    if (z < 0) {
        PyErr_SetString(PyExc_KeyError, "no such zone in this table");
        goto done;
    }
    if ((nodes != Py_None && !owner_shards(nodes)) || !owner_shards(ents) ||
        (interrupts != Py_None && !owner_shards(interrupts))) {
        PyErr_SetString(PyExc_TypeError,
                        "a zone is the shards (a tuple of 2**k dicts) of its nodes (or None), "
                        "of its empty non-terminals and of its delegation and DNAME owners "
                        "(or None)");
        goto done;
    }
    Py_ssize_t changed_n = PyTuple_GET_SIZE(changed);
    Py_ssize_t n = changed_n + (soa == NULL ? 0 : PyTuple_GET_SIZE(soa));
    hashes = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    if (hashes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) { /* the changed owners, then the SOA-only ones */
        PyObject *name = k < changed_n ? PyTuple_GET_ITEM(changed, k)
                                       : PyTuple_GET_ITEM(soa, k - changed_n);
        if (!PyBytes_CheckExact(name)) {
            PyErr_SetString(PyExc_TypeError, "the changed owners are names (bytes)");
            goto done;
        }
        hashes[k] = key_hash((const unsigned char *)PyBytes_AS_STRING(name),
                             (size_t)PyBytes_GET_SIZE(name));
    }
    Zone *zone = &self->zones[z];
    Py_XSETREF(zone->nodes, nodes == Py_None ? NULL : Py_NewRef(nodes));
    Py_XSETREF(zone->ents, Py_NewRef(ents));
    Py_XSETREF(zone->interrupts, interrupts == Py_None ? NULL : Py_NewRef(interrupts));
    zone->wildcard = wildcard;
    if (zone->negatives != NULL) {
        for (size_t i = 0; i < 2 * (MAX_NAME + 1); i++) Py_CLEAR(zone->negatives[i].body);
    }
    zone->gen = ++self->stamp;
    if (zone->reading && !self->readers_lost) {
        for (Py_ssize_t k = 0; k < n; k++) {
            const ReadBucket *b = readers_of(self, hashes[k]);
            if (b == NULL || !b->room) continue;
            for (uint32_t j = 0; j < b->count; j++) {
                Slot *s = &self->slots[b->slots[j]];
                if (slot_touched(s, z, zone, hashes[k], k >= changed_n))
                    s->gen[0] = 0; /* never a `kept` */
            }
        }
    } else if (zone->reading) {
        for (size_t i = 0; i <= self->mask; i++) {
            Slot *s = &self->slots[i];
            for (Py_ssize_t k = 0; k < n; k++)
                if (slot_touched(s, z, zone, hashes[k], k >= changed_n)) {
                    s->gen[0] = 0;
                    break;
                }
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(hashes);
    PyBuffer_Release(&apex);
    return result;
}

/* Whether every zone a slot's entry was read from is still the version it was read
 * from. */
static int slot_fresh(const TableObject *t, const Slot *s) {
    for (int k = 0; k < SLOT_DEPS; k++) {
        int32_t dep = s->dep[k];
        if (dep == DEP_NONE) break;
        uint64_t now = dep >= 0 ? (k == 0 && s->kept ? t->zones[dep].kept : t->zones[dep].gen)
                       : dep == DEP_ROOT ? t->root_gen : t->stamp;
        if (now != s->gen[k]) return 0;
    }
    return 1;
}

/* A slot's deps from `deps` (a tuple of apexes, b"" for "no served zone"; None: any
 * change makes it stale), into `dep`/`gen`; -1 with an error set for an unknown zone. */
static int slot_deps(const TableObject *t, PyObject *deps, int32_t *dep, uint64_t *gen) {
    for (int k = 0; k < SLOT_DEPS; k++) dep[k] = DEP_NONE;
    if (deps == Py_None || PyTuple_GET_SIZE(deps) > SLOT_DEPS) {
        dep[0] = DEP_ANY;
        gen[0] = t->stamp;
        return 0;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(deps); k++) {
        PyObject *apex = PyTuple_GET_ITEM(deps, k);
        if (!PyBytes_CheckExact(apex)) {
            PyErr_SetString(PyExc_TypeError, "an entry's deps are apexes (bytes)");
            return -1;
        }
        if (PyBytes_GET_SIZE(apex) == 0) {
            dep[k] = DEP_ROOT;
            gen[k] = t->root_gen;
            continue;
        }
        long z = zone_at(t, (const unsigned char *)PyBytes_AS_STRING(apex),
                         (size_t)PyBytes_GET_SIZE(apex));
        if (z < 0) {
            PyErr_SetString(PyExc_KeyError, "an entry's dep is no zone in this table");
            return -1;
        }
        dep[k] = (int32_t)z;
        gen[k] = t->zones[z].gen;
    }
    return 0;
}

static int field_u16(PyObject *entry, Py_ssize_t at, uint16_t *out);

static PyObject *Table_negative(TableObject *self, PyObject *args) {
    Py_buffer apex;
    int rcode, at;
    PyObject *entry;
    if (!PyArg_ParseTuple(args, "y*iiO!", &apex, &rcode, &at, &PyTuple_Type, &entry))
        return NULL;
    PyObject *result = NULL;
    long z = zone_at(self, apex.buf, (size_t)apex.len);
    uint16_t flags, an, ns, ar;
    if (z < 0) {
        PyErr_SetString(PyExc_KeyError, "no such zone in this table");
        goto done;
    }
    if ((rcode != 0 && rcode != 3) || at < 0 || at > MAX_NAME) {
        PyErr_SetString(PyExc_ValueError, "a negative answer is NODATA or NXDOMAIN at an offset");
        goto done;
    }
    if (PyTuple_GET_SIZE(entry) != E_FIELDS ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(entry, E_BODY)) ||
        PyTuple_GET_ITEM(entry, E_SHORT_BODY) != Py_None) {
        PyErr_SetString(PyExc_ValueError, "a negative entry has 7 fields, one body and no short one");
        goto done;
    }
    if (field_u16(entry, E_FLAGS, &flags) || field_u16(entry, E_AN, &an) ||
        field_u16(entry, E_NS, &ns) || field_u16(entry, E_AR, &ar))
        goto done;
    Zone *zone = &self->zones[z];
    if (zone->negatives == NULL) { /* made when the zone's first negative is learnt */
        zone->negatives = PyMem_Calloc(2 * (MAX_NAME + 1), sizeof(Negative));
        if (zone->negatives == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    Negative *neg = &zone->negatives[(rcode ? MAX_NAME + 1 : 0) + at];
    neg->flags = flags;
    neg->an = an;
    neg->ns = ns;
    neg->ar = ar;
    Py_XSETREF(neg->body, Py_NewRef(PyTuple_GET_ITEM(entry, E_BODY)));
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&apex);
    return result;
}

static int Table_init(TableObject *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"limit", NULL};
    Py_ssize_t limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", names, &limit)) return -1;
    if (limit < 1 || limit > (1 << 22)) {
        PyErr_SetString(PyExc_ValueError, "limit must be between 1 and 4194304 entries");
        return -1;
    }
    size_t capacity = 8;
    while (capacity < (size_t)limit * 2) capacity <<= 1;
    table_empty(self);
    zones_empty(self);
    PyMem_Free(self->slots);
    PyMem_Free(self->readers); /* sized by the slots: made again for the new size */
    self->readers = NULL;
    self->readers_mask = 0;
    self->slots = PyMem_Calloc(capacity, sizeof(Slot));
    if (self->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->mask = capacity - 1;
    self->count = 0;
    self->limit = limit;
    return 0;
}

static void Table_dealloc(TableObject *self) {
    table_empty(self);
    zones_empty(self);
    PyMem_Free(self->slots);
    PyMem_Free(self->readers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int field_u16(PyObject *entry, Py_ssize_t at, uint16_t *out) {
    PyObject *item = PyTuple_GET_ITEM(entry, at);
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "entry field %zd must be an int", at);
        return -1;
    }
    long value = PyLong_AsLong(item);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value > 0xFFFF) {
        PyErr_Format(PyExc_ValueError, "entry field %zd must be between 0 and 65535", at);
        return -1;
    }
    *out = (uint16_t)value;
    return 0;
}

static PyObject *Table_put(TableObject *self, PyObject *args) {
    Py_buffer key;
    PyObject *entry, *deps = Py_None, *reads = Py_None;
    if (self->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the table was not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*O!|OO", &key, &PyTuple_Type, &entry, &deps, &reads))
        return NULL;
    PyObject *result = NULL;
    uint16_t flags, an, ns, ar, short_ar;
    int32_t dep[SLOT_DEPS];
    uint64_t gen[SLOT_DEPS];
    uint32_t read_hashes[SLOT_READS];
    uint8_t nreads = 0;
    if (deps != Py_None && !PyTuple_CheckExact(deps)) {
        PyErr_SetString(PyExc_TypeError, "an entry's deps are a tuple of apexes, or None");
        goto done;
    }
    if (reads != Py_None) {
        if (!PyTuple_CheckExact(reads)) {
            PyErr_SetString(PyExc_TypeError, "an entry's reads are a tuple of names, or None");
            goto done;
        }
        Py_ssize_t n = PyTuple_GET_SIZE(reads);
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *name = PyTuple_GET_ITEM(reads, k);
            if (!PyBytes_CheckExact(name)) {
                PyErr_SetString(PyExc_TypeError, "an entry's reads are names (bytes)");
                goto done;
            }
            if (k < SLOT_READS)
                read_hashes[k] = key_hash((const unsigned char *)PyBytes_AS_STRING(name),
                                          (size_t)PyBytes_GET_SIZE(name));
        }
        /* more than a slot holds, or none (an answer reads its question's name): kept
         * for its zone's version alone */
        nreads = n > 0 && n <= SLOT_READS ? (uint8_t)n : 0;
    }
    if (key.len < 3 || key.len > KEY_MAX) {
        PyErr_SetString(PyExc_ValueError, "a key is a question name and a type (3 to 257 bytes)");
        goto done;
    }
    if (PyTuple_GET_SIZE(entry) != E_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "an entry has 7 fields");
        goto done;
    }
    PyObject *body = PyTuple_GET_ITEM(entry, E_BODY);
    PyObject *short_body = PyTuple_GET_ITEM(entry, E_SHORT_BODY);
    if (field_u16(entry, E_FLAGS, &flags) || field_u16(entry, E_AN, &an) ||
        field_u16(entry, E_NS, &ns) || field_u16(entry, E_AR, &ar) ||
        field_u16(entry, E_SHORT_AR, &short_ar))
        goto done;
    if (!PyBytes_CheckExact(body) || (short_body != Py_None && !PyBytes_CheckExact(short_body))) {
        PyErr_SetString(PyExc_TypeError, "an entry's bodies must be bytes (the short one or None)");
        goto done;
    }
    if (slot_deps(self, deps, dep, gen) < 0) goto done;
    uint32_t h = key_hash(key.buf, (size_t)key.len);
    Slot *s = table_find(self, key.buf, (size_t)key.len, h);
    if (!s->hash && self->count >= self->limit) {
        table_empty(self);
        s = table_find(self, key.buf, (size_t)key.len, h);
    }
    if (!s->hash) {
        s->key = PyMem_Malloc((size_t)key.len);
        if (s->key == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(s->key, key.buf, (size_t)key.len);
        s->key_len = (uint16_t)key.len;
        s->hash = h;
        self->count++;
    }
    Py_INCREF(body);
    Py_XSETREF(s->body, body);
    if (short_body == Py_None) {
        Py_CLEAR(s->short_body);
    } else {
        Py_INCREF(short_body);
        Py_XSETREF(s->short_body, short_body);
    }
    s->flags = flags;
    s->an = an;
    s->ns = ns;
    s->ar = ar;
    s->short_ar = short_ar;
    memcpy(s->dep, dep, sizeof(dep));
    memcpy(s->gen, gen, sizeof(gen));
    nreads = dep[0] >= 0 && dep[1] == DEP_NONE ? nreads : 0; /* one zone's entries */
    /* listed already when it held the same reads (an entry put again: no new listing) */
    int listed = s->kept && s->nreads == nreads &&
                 memcmp(s->reads, read_hashes, nreads * sizeof(uint32_t)) == 0;
    s->nreads = nreads;
    s->kept = nreads != 0;
    if (s->nreads) {
        memcpy(s->reads, read_hashes, s->nreads * sizeof(uint32_t));
        s->gen[0] = self->zones[dep[0]].kept;
        self->zones[dep[0]].reading++;
        for (int r = 0; r < s->nreads && !listed; r++)
            readers_note(self, read_hashes[r], (size_t)(s - self->slots));
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&key);
    return result;
}

static PyObject *Table_clear(TableObject *self, PyObject *Py_UNUSED(ignored)) {
    table_empty(self);
    Py_RETURN_NONE;
}

static Py_ssize_t Table_len(TableObject *self) { return self->count; }

/* Whether an entry read inside the zone at `apex` was put since the table was last
 * emptied (`Zone.reading`); false for a zone the table does not serve. Without one, a
 * move of the zone walks no slot and no kept answer of it is worth answering again
 * (fastpath._patched). Only the writer (the GIL held) changes the count. */
static PyObject *Table_reading(TableObject *self, PyObject *arg) {
    Py_buffer apex;
    if (PyObject_GetBuffer(arg, &apex, PyBUF_SIMPLE) < 0) return NULL;
    long z = zone_at(self, apex.buf, (size_t)apex.len);
    PyBuffer_Release(&apex);
    return PyBool_FromLong(z >= 0 && self->zones[z].reading != 0);
}

/* --- one query ------------------------------------------------------------------- */

enum { MISS = -1, PLAIN_MISS = -2 };

#define T_CNAME 5
#define T_DS 43
#define T_DNSKEY 48
#define T_NSEC3PARAM 51
#define T_CDS 59
#define T_CDNSKEY 60
#define T_ANY 255
#define NOERROR 0
#define NXDOMAIN 3

/* What Python should tell the table after answering a query C handed back: the zone's
 * negative answer for an RCODE at an offset, when the negative path lacked it. */
typedef struct {
    long zone; /* -1: nothing to ask */
    int rcode;
    int at;
} Wanted;

/* Whether a node's records (records.py's encoding: type, class, TTL, length, rdata)
 * hold `qtype` or a CNAME: then the name has an answer, not NODATA. */
static int answers_at(PyObject *blob, unsigned qtype) {
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(blob);
    size_t size = (size_t)PyBytes_GET_SIZE(blob);
    size_t i = 0;
    while (i + 10 <= size) {
        unsigned rtype = (unsigned)b[i] << 8 | b[i + 1];
        if (rtype == qtype || rtype == T_CNAME) return 1;
        i += 10 + ((size_t)b[i + 8] << 8 | b[i + 9]);
    }
    return i != size; /* malformed: let Python decide */
}

/* The negative answer the Python path gives `name` (lowercased wire form, `len` bytes) and
 * `qtype` when its lookup ends at once in NXDOMAIN or NODATA in a zone C knows, or NULL
 * when Python must answer (then `wanted` may name the negative answer to learn). Only
 * where it is provably the Python path's answer: the deepest zone (as ZoneIndex.zone_for
 * finds it), no delegation or DNAME at or above the name within the zone, no wildcard
 * that could answer a missing name, never DS (the parent's at an apex) nor ANY. */
static const Negative *negative_for(const TableObject *t, const unsigned char *name,
                                    size_t len, unsigned qtype, Wanted *wanted) {
    wanted->zone = -1;
    if (t->zone_count == 0 || qtype == T_DS || qtype == T_ANY) return NULL;
    long z = -1;
    size_t i = 0;
    for (;;) {
        z = zone_at(t, name + i, len - i);
        if (z >= 0 || !name[i]) break;
        i += name[i] + 1;
    }
    if (z < 0) return NULL; /* REFUSED: Python */
    const Zone *zone = &t->zones[z];
    if (zone->nodes == NULL) return NULL;
    PyObject *key = PyBytes_FromStringAndSize((const char *)name, (Py_ssize_t)len);
    if (key == NULL) {
        PyErr_Clear();
        return NULL;
    }
    const Negative *found = NULL;
    int rcode = -1;
    if (zone->interrupts != NULL) {
        /* a delegation point or DNAME owner at or above the name: Python */
        for (size_t at = 0; at + zone->apex_len <= len; at += name[at] + 1) {
            PyObject *ancestor = at ? PyBytes_FromStringAndSize((const char *)name + at,
                                                                (Py_ssize_t)(len - at))
                                    : Py_NewRef(key);
            if (ancestor == NULL) goto fail;
            int held = shard_has(zone->interrupts, ancestor);
            Py_DECREF(ancestor);
            if (held != 0) goto fail;
            if (!name[at]) break;
        }
    }
    PyObject *blob = shard_get(zone->nodes, key); /* borrowed */
    if (blob != NULL) {
        if (!PyBytes_CheckExact(blob) || answers_at(blob, qtype)) goto fail;
        rcode = NOERROR;
    } else {
        if (PyErr_Occurred()) goto fail;
        int ent = shard_has(zone->ents, key);
        if (ent < 0) goto fail;
        if (ent) rcode = NOERROR;
        else if (zone->wildcard) goto fail;
        else rcode = NXDOMAIN;
    }
    int at = (int)(len - zone->apex_len);
    found = zone->negatives == NULL ? NULL : &zone->negatives[(rcode ? MAX_NAME + 1 : 0) + at];
    if (found == NULL || found->body == NULL) {
        wanted->zone = z;
        wanted->rcode = rcode;
        wanted->at = at;
        found = NULL;
    }
    Py_DECREF(key);
    return found;
fail:
    PyErr_Clear();
    Py_DECREF(key);
    return NULL;
}

/* Whether the Python path, given the snapshot's signer, answers `name` (lowercased wire form,
 * `len` bytes) and `qtype` with this DO bit on the unsigned path, whose entries the table
 * holds: signed.Signer.entry's choice. It takes the question's zone (as
 * ZoneIndex.zone_for finds it; for DS at an apex, the nearest zone above, as
 * ZoneIndex.parent_of finds it) and leaves the unsigned path only a zone signed here
 * with DO=0, outside DNSKEY, CDS, CDNSKEY and NSEC3PARAM at its apex, or a zone not
 * signed (whatever the DO bit). */
static int unsigned_path(const TableObject *t, const unsigned char *name, size_t len,
                         unsigned qtype, int do_bit) {
    if (!t->signing) return 1;
    long z = -1;
    size_t i = 0;
    for (;;) {
        z = zone_at(t, name + i, len - i);
        if (z >= 0 || !name[i]) break;
        i += name[i] + 1;
    }
    if (z < 0) return 1;
    if (qtype == T_DS && i == 0) {
        for (size_t j = 0; name[j];) {
            j += name[j] + 1;
            long above = zone_at(t, name + j, len - j);
            if (above >= 0) {
                z = above;
                break;
            }
        }
    }
    int signing = t->zones[z].signing;
    if (signing == UNSIGNED) return 1;
    if (signing != SIGNED || do_bit) return 0;
    return !(i == 0 && (qtype == T_DNSKEY || qtype == T_CDS || qtype == T_CDNSKEY ||
                        qtype == T_NSEC3PARAM));
}

/* _answer.py's `_assemble`: the query's ID, RD and CD, its question bytes exactly, the
 * entry's body (or the short one, or none with TC) to fit the size limit, the OPT. */
static Py_ssize_t assemble(const unsigned char *q, size_t qend, unsigned qflags, long payload,
                           int do_bit, unsigned entry_flags, unsigned an, unsigned ns,
                           unsigned ar, PyObject *body, unsigned short_ar,
                           PyObject *short_body, unsigned char *out) {
    long limit = payload < 0 ? PLAIN_UDP_LIMIT
                 : payload < PLAIN_UDP_LIMIT ? PLAIN_UDP_LIMIT
                 : payload > SERVER_PAYLOAD ? SERVER_PAYLOAD : payload;
    size_t qlen = qend - 12;
    size_t opt = payload < 0 ? 0 : OPT_SIZE;
    long room = limit - 12 - (long)qlen - (long)opt;
    unsigned flags = entry_flags | (qflags & F_ECHOED);
    const char *data = NULL;
    Py_ssize_t data_len = 0;
    if (PyBytes_GET_SIZE(body) <= room) {
        data = PyBytes_AS_STRING(body);
        data_len = PyBytes_GET_SIZE(body);
    } else if (short_body != NULL && PyBytes_GET_SIZE(short_body) <= room) {
        data = PyBytes_AS_STRING(short_body);
        data_len = PyBytes_GET_SIZE(short_body);
        ar = short_ar;
    } else {
        flags |= F_TC;
        an = ns = ar = 0;
    }
    ar += opt ? 1 : 0;
    out[0] = q[0];
    out[1] = q[1];
    out[2] = (unsigned char)(flags >> 8);
    out[3] = (unsigned char)flags;
    out[4] = 0;
    out[5] = 1;
    out[6] = (unsigned char)(an >> 8);
    out[7] = (unsigned char)an;
    out[8] = (unsigned char)(ns >> 8);
    out[9] = (unsigned char)ns;
    out[10] = (unsigned char)(ar >> 8);
    out[11] = (unsigned char)ar;
    memcpy(out + 12, q + 12, qlen);
    size_t n = 12 + qlen;
    if (data_len) {
        memcpy(out + n, data, (size_t)data_len);
        n += (size_t)data_len;
    }
    if (opt) {
        static const unsigned char plain[OPT_SIZE] = {0, 0, T_OPT, SERVER_PAYLOAD >> 8,
                                                      SERVER_PAYLOAD & 0xFF, 0, 0, 0, 0, 0, 0};
        memcpy(out + n, plain, OPT_SIZE);
        if (do_bit) out[n + 7] = 0x80;
        n += OPT_SIZE;
    }
    return (Py_ssize_t)n;
}

/* Answer `q` from `t` into `out` (room for SERVER_PAYLOAD bytes): the response's length;
 * PLAIN_MISS when the query takes the plain path but `t` cannot answer it (its key is
 * then in `key`, `*key_len` bytes, and `wanted` may name a negative answer to learn);
 * MISS for anything the plain path does not cover. Called with the GIL held, or
 * (`nogil`: the table's entries only, no negative path) under the read lock. */
static Py_ssize_t answer_from(const TableObject *t, const unsigned char *q, size_t size,
                              unsigned char *out, unsigned char *key, size_t *key_len,
                              Wanted *wanted, int nogil) {
    *key_len = 0;
    wanted->zone = -1;
    if (size < 12) return MISS;
    unsigned qflags = (unsigned)q[2] << 8 | q[3];
    if (qflags & (F_QR | F_OPCODE)) return MISS;
    /* QDCOUNT 1, ANCOUNT 0, NSCOUNT 0 */
    if (q[4] || q[5] != 1 || q[6] || q[7] || q[8] || q[9]) return MISS;
    unsigned arcount = (unsigned)q[10] << 8 | q[11];
    size_t i = 12;
    for (;;) {
        if (i >= size) return MISS;
        unsigned length = q[i];
        if (!length) break;
        if (length > MAX_LABEL) return MISS;
        i += length + 1;
    }
    i += 1;
    if (i - 12 > MAX_NAME || i + 4 > size) return MISS;
    size_t qend = i + 4;
    long payload = -1;
    int do_bit = 0;
    if (arcount == 0 && qend == size) {
        /* no additional section */
    } else if (arcount == 1 && size >= qend + OPT_SIZE) {
        const unsigned char *tail = q + qend;
        /* one OPT: root owner, version 0, options as message.py's scan reads them (whole
         * code-length-value triples filling the rdata, at most MAX_OPTIONS); none of them
         * changes the answer */
        if (tail[0] || tail[1] || tail[2] != T_OPT || tail[6]) return MISS;
        size_t j = qend + OPT_SIZE;
        if (j + ((size_t)tail[9] << 8 | tail[10]) != size) return MISS;
        for (unsigned options = 0; j < size; options++) {
            if (options == MAX_OPTIONS || j + 4 > size) return MISS;
            j += 4 + ((size_t)q[j + 2] << 8 | q[j + 3]);
        }
        if (j != size) return MISS;
        payload = (long)tail[3] << 8 | tail[4];
        do_bit = tail[7] & 0x80;
    } else {
        return MISS;
    }
    if (q[qend - 2] != 0 || q[qend - 1] != 1) return MISS; /* class IN */
    unsigned qtype = (unsigned)q[qend - 4] << 8 | q[qend - 3];
    if (qtype == T_AXFR || qtype == T_IXFR) return MISS;
    size_t qname_len = qend - 4 - 12;
    for (size_t k = 0; k < qname_len; k++) {
        unsigned char c = q[12 + k];
        key[k] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
    }
    key[qname_len] = q[qend - 4];
    key[qname_len + 1] = q[qend - 3];
    *key_len = qname_len + 2;
    if (t == NULL || t->slots == NULL) return PLAIN_MISS;
    if (!unsigned_path(t, key, qname_len, qtype, do_bit)) {
        *key_len = 0; /* the signer's answer: nothing for the table to learn */
        return MISS;
    }
    const Slot *s = table_find((TableObject *)t, key, *key_len, key_hash(key, *key_len));
    if (s != NULL && s->hash && slot_fresh(t, s))
        return assemble(q, qend, qflags, payload, do_bit, s->flags, s->an, s->ns, s->ar,
                        s->body, s->short_ar, s->short_body, out);
    if (nogil) return PLAIN_MISS; /* the negative path reads Python's dicts: the GIL's */
    const Negative *neg = negative_for(t, key, qname_len, qtype, wanted);
    if (neg != NULL)
        return assemble(q, qend, qflags, payload, do_bit, neg->flags, neg->an, neg->ns,
                        neg->ar, neg->body, 0, NULL, out);
    return PLAIN_MISS;
}

/* The miss tuple's last field: the negative answer Python should hand the table. */
static PyObject *wanted_tuple(const TableObject *t, const Wanted *wanted) {
    if (wanted->zone < 0) return Py_NewRef(Py_None);
    const Zone *zone = &t->zones[wanted->zone];
    return Py_BuildValue("(y#ii)", (const char *)zone->apex, (Py_ssize_t)zone->apex_len,
                         wanted->rcode, wanted->at);
}

static PyObject *Table_ask(TableObject *self, PyObject *arg) {
    Py_buffer query;
    if (PyObject_GetBuffer(arg, &query, PyBUF_SIMPLE) < 0) return NULL;
    unsigned char out[SERVER_PAYLOAD];
    unsigned char key[KEY_MAX];
    size_t key_len;
    Wanted wanted;
    Py_ssize_t n = answer_from(self, query.buf, (size_t)query.len, out, key, &key_len, &wanted, 0);
    PyBuffer_Release(&query);
    if (n >= 0) return Py_BuildValue("(y#OO)", (const char *)out, n, Py_None, Py_None);
    PyObject *learn = wanted_tuple(self, &wanted);
    if (learn == NULL) return NULL;
    return Py_BuildValue("(Oy#N)", Py_None, key_len ? (const char *)key : NULL,
                         (Py_ssize_t)key_len, learn);
}

/* Every change to a table is a write under the readers' lock (the GIL held). */
#define WRITE(method)                                                        \
    static PyObject *method##_write(TableObject *self, PyObject *arg) {      \
        write_begin();                                                       \
        PyObject *result = method(self, arg);                                \
        write_end();                                                         \
        return result;                                                       \
    }
WRITE(Table_put)
WRITE(Table_moved)
WRITE(Table_drop)
WRITE(Table_enclosing)
WRITE(Table_zone)
WRITE(Table_negative)
WRITE(Table_clear)

static int Table_init_write(TableObject *self, PyObject *args, PyObject *kwds) {
    write_begin();
    int result = Table_init(self, args, kwds);
    write_end();
    return result;
}

/* A newer table answers for this one's holder (fastpath.shared_table): a worker still
 * holding this one answers nothing more from it and asks for the new one. */
static PyObject *Table_retire(TableObject *self, PyObject *Py_UNUSED(ignored)) {
    write_begin();
    self->retired = 1;
    write_end();
    Py_RETURN_NONE;
}

static PyMethodDef Table_methods[] = {
    {"put", (PyCFunction)Table_put_write, METH_VARARGS,
     "put(key, entry, deps=None, reads=None): keep the Python path's entry for the "
     "question key, read from the zones deps names (apexes; b\"\": none found; None: any "
     "change makes it stale), and inside its one zone the names reads gives."},
    {"moved", (PyCFunction)Table_moved_write, METH_VARARGS,
     "moved(apex, nodes, empty_nonterminals, interrupts, wildcard, changed, soa_only=()): "
     "the zone patched, changed the owners replaced since, soa_only those whose SOA alone "
     "changed; entries it alone gave that read none of changed, and none of soa_only or "
     "with an answer that cannot hold an SOA, are kept."},
    {"drop", (PyCFunction)Table_drop_write, METH_O,
     "drop(apex): forget a zone; the entries read from it are stale."},
    {"enclosing", (PyCFunction)Table_enclosing_write, METH_O,
     "enclosing(apex): a zone was added or dropped at apex; the entries read from the "
     "zone above it (or from no zone) are stale."},
    {"clear", (PyCFunction)Table_clear_write, METH_NOARGS, "Forget every cached answer."},
    {"zone", (PyCFunction)Table_zone_write, METH_VARARGS,
     "zone(apex, nodes, empty_nonterminals, interrupts, wildcard, signing=0): a served "
     "zone, its tables as owner-table shards (signing: 0 unsigned, 1 signed, 2 signed "
     "without its key here)."},
    {"negative", (PyCFunction)Table_negative_write, METH_VARARGS,
     "negative(apex, rcode, at, entry): the zone's negative answer at an offset."},
    {"reading", (PyCFunction)Table_reading, METH_O,
     "reading(apex): whether an entry read inside the zone at apex was put since the "
     "table was last emptied (False: no such zone served)."},
    {"retire", (PyCFunction)Table_retire, METH_NOARGS,
     "retire(): a newer table answers for the holder; workers answer nothing more from "
     "this one."},
    {"ask", (PyCFunction)Table_ask, METH_O,
     "ask(query): (the UDP response C gives, or None; else the question's key and the "
     "negative answer to learn, or None)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Table_as_sequence = {.sq_length = (lenfunc)Table_len};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "valis_core.dns.answer._fastpath.Table",
    .tp_basicsize = sizeof(TableObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encoded responses of one holder's snapshots, keyed by question.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Table_init_write,
    .tp_dealloc = (destructor)Table_dealloc,
    .tp_methods = Table_methods,
    .tp_as_sequence = &Table_as_sequence,
};

/* --- the pump -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    int fd;
    unsigned batch;
    unsigned received;
    unsigned queued;
    int busy;
    unsigned char *in;  /* batch * MAX_DATAGRAM */
    unsigned char *out; /* batch * SERVER_PAYLOAD: C's responses */
    struct sockaddr_storage *peers;
    struct iovec *rx_iov;
    struct mmsghdr *rx;
    struct iovec *tx_iov;
    struct mmsghdr *tx;
    PyObject **held;        /* Python's responses queued, until flush */
    unsigned char *replied; /* per received datagram */
    /* What a worker's `serve` sent, added after each batch (atomically: the writer's
     * thread takes them meanwhile, `Pump.take`): by RCODE, then answered in C,
     * truncated, send failures. */
    unsigned long long tally[RCODES + 3];
} PumpObject;

static void pump_release(PumpObject *p) {
    for (unsigned i = 0; i < p->queued; i++) Py_CLEAR(p->held[i]);
    p->queued = 0;
    p->received = 0;
}

static void Pump_dealloc(PumpObject *self) {
    if (self->held != NULL) pump_release(self);
    PyMem_Free(self->in);
    PyMem_Free(self->out);
    PyMem_Free(self->peers);
    PyMem_Free(self->rx_iov);
    PyMem_Free(self->rx);
    PyMem_Free(self->tx_iov);
    PyMem_Free(self->tx);
    PyMem_Free(self->held);
    PyMem_Free(self->replied);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Pump_init(PumpObject *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"fd", "batch", NULL};
    int fd;
    unsigned batch;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iI", names, &fd, &batch)) return -1;
    if (fd < 0 || batch < 1 || batch > MAX_BATCH) {
        PyErr_SetString(PyExc_ValueError, "a pump needs a descriptor and a batch of 1 to 1024");
        return -1;
    }
    if (self->in != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a pump is initialised once");
        return -1;
    }
    self->fd = fd;
    self->batch = batch;
    self->in = PyMem_Malloc((size_t)batch * MAX_DATAGRAM);
    self->out = PyMem_Malloc((size_t)batch * SERVER_PAYLOAD);
    self->peers = PyMem_Calloc(batch, sizeof(struct sockaddr_storage));
    self->rx_iov = PyMem_Calloc(batch, sizeof(struct iovec));
    self->rx = PyMem_Calloc(batch, sizeof(struct mmsghdr));
    self->tx_iov = PyMem_Calloc(batch, sizeof(struct iovec));
    self->tx = PyMem_Calloc(batch, sizeof(struct mmsghdr));
    self->held = PyMem_Calloc(batch, sizeof(PyObject *));
    self->replied = PyMem_Calloc(batch, 1);
    if (!self->in || !self->out || !self->peers || !self->rx_iov || !self->rx || !self->tx_iov ||
        !self->tx || !self->held || !self->replied) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int pump_ready(PumpObject *self) {
    if (self->in == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the pump was not initialised");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the pump is in use by another thread");
        return 0;
    }
    return 1;
}

static void queue(PumpObject *self, unsigned slot, void *data, size_t len, PyObject *held) {
    unsigned n = self->queued++;
    self->tx_iov[n].iov_base = data;
    self->tx_iov[n].iov_len = len;
    memset(&self->tx[n], 0, sizeof(self->tx[n]));
    self->tx[n].msg_hdr.msg_name = &self->peers[slot];
    self->tx[n].msg_hdr.msg_namelen = self->rx[slot].msg_hdr.msg_namelen;
    self->tx[n].msg_hdr.msg_iov = &self->tx_iov[n];
    self->tx[n].msg_hdr.msg_iovlen = 1;
    self->held[n] = held;
    self->replied[slot] = 1;
}

/* A peer's address as Python's socket module gives it: (host, port), or for IPv6 (host
 * with its scope, port, flow info, scope id). */
static PyObject *peer_tuple(const struct sockaddr_storage *peer) {
    char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)peer;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
        return Py_BuildValue("(si)", host, ntohs(v4->sin_port));
    }
    if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)peer;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
        if (v6->sin6_scope_id) {
            char name[IF_NAMESIZE];
            size_t used = strlen(host);
            if (if_indextoname(v6->sin6_scope_id, name) != NULL)
                snprintf(host + used, sizeof(host) - used, "%%%s", name);
            else
                snprintf(host + used, sizeof(host) - used, "%%%u", v6->sin6_scope_id);
        }
        return Py_BuildValue("(siII)", host, ntohs(v6->sin6_port), ntohl(v6->sin6_flowinfo),
                             v6->sin6_scope_id);
    }
    PyErr_SetString(PyExc_ValueError, "the peer is neither IPv4 nor IPv6");
    return NULL;
}

static void prepare_rx(PumpObject *self) {
    for (unsigned i = 0; i < self->batch; i++) {
        self->rx_iov[i].iov_base = self->in + (size_t)i * MAX_DATAGRAM;
        self->rx_iov[i].iov_len = MAX_DATAGRAM;
        memset(&self->rx[i], 0, sizeof(self->rx[i]));
        self->rx[i].msg_hdr.msg_name = &self->peers[i];
        self->rx[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_storage);
        self->rx[i].msg_hdr.msg_iov = &self->rx_iov[i];
        self->rx[i].msg_hdr.msg_iovlen = 1;
        self->replied[i] = 0;
    }
}

/* Answer from `table` (with the GIL) every datagram of the batch not answered yet: the
 * list of those handed back to Python, (slot, query, key, wanted) each. */
static PyObject *answer_rest(PumpObject *self, const TableObject *table) {
    PyObject *misses = PyList_New(0);
    if (misses == NULL) return NULL;
    unsigned char key[KEY_MAX];
    for (unsigned i = 0; i < self->received; i++) {
        if (self->replied[i]) continue;
        const unsigned char *q = self->rx_iov[i].iov_base;
        size_t size = self->rx[i].msg_len;
        unsigned char *out = self->out + (size_t)i * SERVER_PAYLOAD;
        size_t key_len;
        Wanted wanted;
        Py_ssize_t n = answer_from(table, q, size, out, key, &key_len, &wanted, 0);
        if (n >= 0) {
            queue(self, i, out, (size_t)n, NULL);
            continue;
        }
        PyObject *learn = wanted_tuple(table, &wanted);
        if (learn == NULL) {
            Py_DECREF(misses);
            return NULL;
        }
        PyObject *miss = Py_BuildValue(
            "(Iy#y#N)", i, (const char *)q, (Py_ssize_t)size,
            key_len ? (const char *)key : NULL, (Py_ssize_t)key_len, learn);
        if (miss == NULL || PyList_Append(misses, miss) < 0) {
            Py_XDECREF(miss);
            Py_DECREF(misses);
            return NULL;
        }
        Py_DECREF(miss);
    }
    return misses;
}

static PyObject *Pump_drain(PumpObject *self, PyObject *arg) {
    if (!pump_ready(self)) return NULL;
    if (arg != Py_None && !PyObject_TypeCheck(arg, &TableType)) {
        PyErr_SetString(PyExc_TypeError, "drain takes a Table or None");
        return NULL;
    }
    const TableObject *table = arg == Py_None ? NULL : (const TableObject *)arg;
    pump_release(self);
    prepare_rx(self);
    int got;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    got = recvmmsg(self->fd, self->rx, self->batch, MSG_DONTWAIT, NULL);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    /* Would block (drained), or a pending socket error (an ICMP report) the call
     * consumed: nothing received; the caller waits for the next datagram. */
    self->received = got > 0 ? (unsigned)got : 0;
    PyObject *misses = answer_rest(self, table);
    if (misses == NULL) return NULL;
    return Py_BuildValue("(IN)", self->received, misses);
}

static PyObject *Pump_pending(PumpObject *self, PyObject *arg) {
    if (!pump_ready(self)) return NULL;
    if (arg != Py_None && !PyObject_TypeCheck(arg, &TableType)) {
        PyErr_SetString(PyExc_TypeError, "pending takes a Table or None");
        return NULL;
    }
    return answer_rest(self, arg == Py_None ? NULL : (const TableObject *)arg);
}

/* Send every queued response (sendmmsg, as many calls as it takes), counting what was
 * sent by RCODE, the truncated ones, and the failures. Needs no GIL. */
static void send_queued(PumpObject *self, unsigned long long *sent,
                        unsigned long long *truncated, unsigned long long *failures) {
    unsigned at = 0, interrupted = 0;
    while (at < self->queued) {
        int n = sendmmsg(self->fd, self->tx + at, self->queued - at, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR && interrupted < self->batch) {
            interrupted++; /* a signal arrived: send again, as Python's sendto does */
            continue;
        }
        if (n <= 0) {
            /* Send buffer full (EAGAIN) or an unroutable peer: UDP may lose it. */
            (*failures)++;
            at++;
            continue;
        }
        for (int k = 0; k < n; k++) {
            const unsigned char *response = self->tx_iov[at + (unsigned)k].iov_base;
            sent[response[3] & 0x0F]++;
            if (response[2] & 0x02) (*truncated)++;
        }
        at += (unsigned)n;
    }
}

/* Add `sent` (by RCODE) to the Python list of 16 counters. */
static int count_sent(PyObject *rcodes, const unsigned long long *sent) {
    for (int r = 0; r < RCODES; r++) {
        if (!sent[r]) continue;
        PyObject *old = PyList_GET_ITEM(rcodes, r);
        PyObject *add = PyLong_FromUnsignedLongLong(sent[r]);
        if (add == NULL) return -1;
        PyObject *sum = PyNumber_Add(old, add);
        Py_DECREF(add);
        if (sum == NULL) return -1;
        PyList_SetItem(rcodes, r, sum);
    }
    return 0;
}

/* A datagram a worker's batch leaves for Python, noted under the read lock. */
typedef struct {
    unsigned slot;
    size_t key_len;
    unsigned char key[KEY_MAX];
    int wanted; /* whether the zone's negative answer is to be learnt: */
    int rcode, at;
    size_t apex_len;
    unsigned char apex[MAX_NAME];
} Handed;

/* Offer the `noted` misses to `handoff` as a list of (query, peer, key, wanted); whether
 * it took them. The GIL held, no lock; a failure is reported as unraisable and the
 * misses stay the batch's. */
static int hand_off(PumpObject *self, PyObject *handoff, const Handed *handed,
                    unsigned noted) {
    PyObject *misses = PyList_New(noted);
    if (misses == NULL) goto failed;
    for (unsigned k = 0; k < noted; k++) {
        const Handed *h = &handed[k];
        PyObject *peer = peer_tuple(&self->peers[h->slot]);
        PyObject *learn = peer == NULL ? NULL
                          : h->wanted ? Py_BuildValue("(y#ii)", (const char *)h->apex,
                                                      (Py_ssize_t)h->apex_len, h->rcode, h->at)
                                      : Py_NewRef(Py_None);
        if (learn == NULL) {
            Py_XDECREF(peer);
            Py_DECREF(misses);
            goto failed;
        }
        PyObject *miss = Py_BuildValue(
            "(y#Ny#N)", (const char *)self->rx_iov[h->slot].iov_base,
            (Py_ssize_t)self->rx[h->slot].msg_len, peer,
            h->key_len ? (const char *)h->key : NULL, (Py_ssize_t)h->key_len, learn);
        if (miss == NULL) {
            Py_DECREF(misses);
            goto failed;
        }
        PyList_SET_ITEM(misses, k, miss);
    }
    PyObject *taken = PyObject_CallOneArg(handoff, misses);
    Py_DECREF(misses);
    int took = taken == NULL ? -1 : PyObject_IsTrue(taken);
    Py_XDECREF(taken);
    if (took >= 0) return took;
failed:
    PyErr_WriteUnraisable(handoff);
    return 0;
}

/* Add one batch's counts to the pump's tally, which `Pump.take` empties on the writer's
 * thread while a worker may be adding: each counter is added to atomically. */
static void tally(PumpObject *self, const unsigned long long *sent, unsigned long long compiled,
                  unsigned long long truncated, unsigned long long failures) {
    for (int r = 0; r < RCODES; r++)
        if (sent[r]) __atomic_fetch_add(&self->tally[r], sent[r], __ATOMIC_RELAXED);
    if (compiled) __atomic_fetch_add(&self->tally[RCODES], compiled, __ATOMIC_RELAXED);
    if (truncated) __atomic_fetch_add(&self->tally[RCODES + 1], truncated, __ATOMIC_RELAXED);
    if (failures) __atomic_fetch_add(&self->tally[RCODES + 2], failures, __ATOMIC_RELAXED);
}

/* A worker's drain (fastpath.py, serve/_udp_loop.py): for up to `budget` milliseconds,
 * receive batches and answer each datagram the table holds with the GIL released (the
 * table read under the read lock, batch by batch), sending each batch whole; a batch with
 * others sends what C answered first and then takes the GIL to answer the others from
 * the zones' negative answers (read_trylock: only
 * when no write is under way); those still left for Python go to `handoff` (a
 * callable, or None), each as (query, peer, key, wanted), and when it takes them (says
 * true) the batch is sent and the loop goes on, Python answering them later on its own
 * thread. When it does not (or the table was retired), the call returns with them
 * unanswered and the batch's answers queued: then `pending`, `reply` and `flush` finish
 * the batch on the writer's thread. Returns how many datagrams are left for Python;
 * what was sent (by RCODE), answered in C, truncated and failed to send is added to the
 * pump's tally after each batch, which `take` empties (the writer's thread reads the
 * counts without waiting for the worker to come back). An idle socket is waited for in poll, never past the budget once a
 * datagram was received; before the first, up to `idle` ms (at least the budget), and
 * the budget then starts when one arrives; a readable `wake` descriptor (the caller's
 * cancellation) ends the wait and the call. */
static PyObject *Pump_serve(PumpObject *self, PyObject *args) {
    PyObject *arg, *handoff = Py_None;
    int budget, wake = -1, idle = 0;
    if (!PyArg_ParseTuple(args, "O!i|Oii", &TableType, &arg, &budget, &handoff, &wake, &idle))
        return NULL;
    if (!pump_ready(self)) return NULL;
    TableObject *t = (TableObject *)arg; /* the caller's reference keeps it */
    if (idle < budget) idle = budget;
    if (t->slots == NULL || budget < 1 || idle > 60000) {
        PyErr_SetString(PyExc_ValueError, "serve takes an initialised table and a budget "
                                          "(and an idle wait) of 1 to 60000 ms");
        return NULL;
    }
    pump_release(self);
    unsigned long long sent[RCODES], truncated, failures, compiled;
    unsigned pending = 0;
    long long start = monotonic_ns();
    long long deadline = start + (long long)budget * 1000000LL;
    long long idle_deadline = start + (long long)idle * 1000000LL;
    int received_any = 0; /* until then the idle wait bounds the call, not the budget */
    unsigned char key[KEY_MAX];
    size_t key_len;
    Wanted wanted;
    Handed *handed = NULL; /* the misses noted for `handoff`, a batch's worth */
    if (handoff != Py_None) {
        handed = PyMem_Malloc(self->batch * sizeof(Handed));
        if (handed == NULL) return PyErr_NoMemory();
    }
    int drained = 0; /* the last batch was not full: wait in poll before receiving */
    self->busy = 1;
    PyThreadState *released = PyEval_SaveThread();
    for (;;) { /* bounded by the deadline (the idle wait's until a datagram arrives) */
        long long now = monotonic_ns();
        long long until = received_any ? deadline : idle_deadline;
        if (now >= until) break;
        if (drained) {
            struct pollfd ready[2] = {{.fd = self->fd, .events = POLLIN},
                                      {.fd = wake, .events = POLLIN}};
            drained = 0;
            if (poll(ready, wake >= 0 ? 2 : 1, (int)((until - now + 999999) / 1000000)) <= 0)
                continue;
            if (wake >= 0 && ready[1].revents) break; /* the caller is woken: come back */
            if (!received_any) deadline = monotonic_ns() + (long long)budget * 1000000LL;
        }
        prepare_rx(self);
        int got = recvmmsg(self->fd, self->rx, self->batch, MSG_DONTWAIT, NULL);
        if (got <= 0) {
            drained = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
            continue; /* or an ICMP report the call consumed, or EINTR: receive again */
        }
        memset(sent, 0, sizeof(sent));
        truncated = failures = compiled = 0;
        received_any = 1;
        drained = (unsigned)got < self->batch;
        self->received = (unsigned)got;
        int retired = 1; /* not read: a write outlasted the budget, or the table retired */
        if (read_lock_until(deadline)) {
            retired = t->retired;
            for (unsigned i = 0; i < self->received && !retired; i++) {
                unsigned char *out = self->out + (size_t)i * SERVER_PAYLOAD;
                Py_ssize_t n = answer_from(t, self->rx_iov[i].iov_base, self->rx[i].msg_len,
                                           out, key, &key_len, &wanted, 1);
                if (n >= 0) queue(self, i, out, (size_t)n, NULL);
            }
            read_unlock();
        }
        compiled += self->queued;
        pending = self->received - self->queued;
        if (pending) {
            if (self->queued) {
                /* C's answers go now: taking the GIL may wait for the trio thread (a
                 * transfer, a patch) for milliseconds, and they need nothing of it. The
                 * slots stay replied: the rest of the batch skips them. */
                send_queued(self, sent, &truncated, &failures);
                self->queued = 0;
            }
            PyEval_RestoreThread(released);
            released = NULL;
            /* Nothing that could run Python (an allocation of a container may collect
             * garbage, and a finalizer let the writer in) while the read lock is held:
             * the misses are noted in C and made Python's after it is released. */
            unsigned noted = 0;
            if (!retired && read_trylock()) {
                for (unsigned i = 0; i < self->received; i++) {
                    if (self->replied[i]) continue;
                    unsigned char *out = self->out + (size_t)i * SERVER_PAYLOAD;
                    Py_ssize_t n = answer_from(t, self->rx_iov[i].iov_base,
                                               self->rx[i].msg_len, out, key, &key_len,
                                               &wanted, 0);
                    if (n >= 0) {
                        queue(self, i, out, (size_t)n, NULL);
                        pending--;
                        compiled++;
                        continue;
                    }
                    if (handed == NULL) continue;
                    Handed *h = &handed[noted++];
                    h->slot = i;
                    h->key_len = key_len;
                    memcpy(h->key, key, key_len);
                    h->wanted = wanted.zone >= 0;
                    if (h->wanted) {
                        const Zone *zone = &t->zones[wanted.zone];
                        h->apex_len = zone->apex_len;
                        memcpy(h->apex, zone->apex, zone->apex_len);
                        h->rcode = wanted.rcode;
                        h->at = wanted.at;
                    }
                }
                read_unlock();
            }
            if (pending && handed != NULL && noted == pending && hand_off(self, handoff,
                                                                          handed, noted)) {
                for (unsigned i = 0; i < self->received; i++) self->replied[i] = 1;
                pending = 0;
            }
            if (pending) { /* Python's: the batch stays, answered in part */
                tally(self, sent, compiled, truncated, failures);
                break;
            }
            released = PyEval_SaveThread();
        }
        send_queued(self, sent, &truncated, &failures);
        self->queued = self->received = 0; /* C's answers only: no reference held */
        tally(self, sent, compiled, truncated, failures);
    }
    if (released != NULL) PyEval_RestoreThread(released);
    PyMem_Free(handed);
    self->busy = 0;
    if (!pending) self->queued = self->received = 0;
    return PyLong_FromUnsignedLong(pending);
}

static PyObject *Pump_take(PumpObject *self, PyObject *Py_UNUSED(ignored)) {
    unsigned long long taken[RCODES + 3];
    for (int k = 0; k < RCODES + 3; k++)
        taken[k] = __atomic_exchange_n(&self->tally[k], 0ULL, __ATOMIC_RELAXED);
    PyObject *rcodes = PyList_New(RCODES);
    if (rcodes == NULL) return NULL;
    for (int r = 0; r < RCODES; r++) {
        PyObject *count = PyLong_FromUnsignedLongLong(taken[r]);
        if (count == NULL) {
            Py_DECREF(rcodes);
            return NULL;
        }
        PyList_SET_ITEM(rcodes, r, count);
    }
    return Py_BuildValue("(NKKK)", rcodes, taken[RCODES], taken[RCODES + 1],
                         taken[RCODES + 2]);
}

static PyObject *Pump_reply(PumpObject *self, PyObject *args) {
    unsigned slot;
    PyObject *response;
    if (!PyArg_ParseTuple(args, "IO!", &slot, &PyBytes_Type, &response)) return NULL;
    if (!pump_ready(self)) return NULL;
    if (slot >= self->received) {
        PyErr_SetString(PyExc_IndexError, "no such datagram in this batch");
        return NULL;
    }
    if (self->replied[slot]) {
        PyErr_SetString(PyExc_ValueError, "this datagram has a reply already");
        return NULL;
    }
    Py_INCREF(response);
    queue(self, slot, PyBytes_AS_STRING(response), (size_t)PyBytes_GET_SIZE(response), response);
    Py_RETURN_NONE;
}

static PyObject *Pump_peer(PumpObject *self, PyObject *arg) {
    if (!pump_ready(self)) return NULL;
    unsigned long slot = PyLong_AsUnsignedLong(arg);
    if (slot == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (slot >= self->received) {
        PyErr_SetString(PyExc_IndexError, "no such datagram in this batch");
        return NULL;
    }
    return peer_tuple(&self->peers[slot]);
}

static PyObject *Pump_flush(PumpObject *self, PyObject *arg) {
    if (!pump_ready(self)) return NULL;
    if (!PyList_CheckExact(arg) || PyList_GET_SIZE(arg) != RCODES) {
        PyErr_SetString(PyExc_TypeError, "flush takes the list of 16 RCODE counters");
        return NULL;
    }
    unsigned long long sent[RCODES] = {0};
    unsigned long long truncated = 0, failures = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    send_queued(self, sent, &truncated, &failures);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    pump_release(self);
    if (count_sent(arg, sent) < 0) return NULL;
    return Py_BuildValue("(KK)", truncated, failures);
}

static PyMethodDef Pump_methods[] = {
    {"drain", (PyCFunction)Pump_drain, METH_O,
     "drain(table): receive a batch, answer what table holds; (received, misses)."},
    {"reply", (PyCFunction)Pump_reply, METH_VARARGS,
     "reply(slot, response): queue Python's response to datagram slot."},
    {"peer", (PyCFunction)Pump_peer, METH_O, "peer(slot): the sender's address."},
    {"flush", (PyCFunction)Pump_flush, METH_O,
     "flush(rcodes): send every queued response; (truncated, send failures)."},
    {"serve", (PyCFunction)Pump_serve, METH_VARARGS,
     "serve(table, budget_ms, handoff=None, wake=-1, idle_ms=budget_ms): a worker's "
     "drain, the GIL released while it answers from table; handoff(misses) may take what "
     "only Python answers; idle (nothing received) it waits up to idle_ms, or until wake "
     "is readable; the datagrams left for Python (its counts go to the tally)."},
    {"take", (PyCFunction)Pump_take, METH_NOARGS,
     "take(): what serve sent since the last take, emptied: ([count by RCODE], answered "
     "in C, truncated, send failures)."},
    {"pending", (PyCFunction)Pump_pending, METH_O,
     "pending(table): answer the rest of the batch serve left, as drain does; the misses."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PumpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "valis_core.dns.answer._fastpath.Pump",
    .tp_basicsize = sizeof(PumpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One UDP socket's batches: recvmmsg in, sendmmsg out.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pump_init,
    .tp_dealloc = (destructor)Pump_dealloc,
    .tp_methods = Pump_methods,
};

/* --- TCP: one connection's queries (serve/_tcp_loop.py) ---------------------------- */

/* `stream_serve` answers the queries of one DNS-over-TCP connection (RFC 1035 4.2.2
 * framing, RFC 7766 pipelining) that the table holds, on a worker thread with the GIL
 * released or on the trio thread with it (then the zones' negative answers too), and
 * gives the connection back to Python at the first message it cannot answer: Python
 * keeps the connection, its unread bytes and every limit (the cap, the idle timeout,
 * the turns, the write timeout); C only ever reads what is there now (MSG_DONTWAIT), at
 * most STREAM_READS times a call, and never waits. A response is C's only when it is
 * the bytes `answer` gives over TCP: the table's entry whole, which TCP's larger room
 * always takes when the UDP answer C assembles took it (`answer_stream`); anything
 * else is Python's. */

/* How a call ends (fastpath.STREAM_*): no whole message buffered and nothing more to
 * read now; the first buffered message is Python's; `frames` messages answered (the
 * connection's turn is over); the peer closed its side; the socket took part of the
 * responses (Python writes the rest); the connection failed (Python closes it). */
enum {
    STREAM_WAIT = 0,
    STREAM_MISS = 1,
    STREAM_TURN = 2,
    STREAM_EOF = 3,
    STREAM_STALLED = 4,
    STREAM_FAILED = 5
};

#define STREAM_READ (MAX_DATAGRAM + 2)    /* one read, as Python's loop reads */
#define STREAM_IN (2 * STREAM_READ)       /* less than a message buffered, and a read */
#define STREAM_FRAMES 64                  /* messages a call answers at most */
#define STREAM_OUT (STREAM_FRAMES * (2 + SERVER_PAYLOAD))
#define STREAM_RETRIES 64                 /* EINTRs retried per call */
#define STREAM_READS 128                  /* reads per call: a client trickling bytes as
                                             fast as C reads them holds it no longer */

/* The response to `q` (`size` bytes) over TCP from `t`: answer_from's (`nogil`: the
 * entries only, under the read lock; else with the GIL on the writer's thread, the zones'
 * negative answers too), when the entry went in whole (not the short body, not TC: then
 * `answer` over TCP, with room for all of it, gives these very bytes; a negative answer
 * has no short body); else MISS, or PLAIN_MISS with the key when the table lacks the
 * question. */
static Py_ssize_t answer_stream(const TableObject *t, const unsigned char *q, size_t size,
                                unsigned char *out, unsigned char *key, size_t *key_len,
                                int nogil) {
    Wanted wanted;
    Py_ssize_t n = answer_from(t, q, size, out, key, key_len, &wanted, nogil);
    if (n < 0) return n;
    size_t qend = 12 + *key_len + 2;
    const Slot *s = table_find((TableObject *)t, key, *key_len, key_hash(key, *key_len));
    int whole = !(out[2] & (F_TC >> 8));
    if (s != NULL && s->hash && slot_fresh(t, s)) /* answer_from's entry: was it whole? */
        whole = whole && (size_t)n == qend + (size_t)PyBytes_GET_SIZE(s->body) +
                                           (size > qend ? OPT_SIZE : 0);
    if (!whole) {
        *key_len = 0; /* held, but not whole in a UDP answer's room: Python's */
        return MISS;
    }
    return n;
}

/* Write `out[*at..len]` (no GIL): 0 when all of it went, STREAM_STALLED when the socket
 * took less (`*at` then marks what is left), STREAM_FAILED when the connection failed. */
static int stream_write(int fd, const unsigned char *out, size_t len, size_t *at,
                        unsigned *retries) {
    while (*at < len) {
        ssize_t n = send(fd, out + *at, len - *at, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            *at += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR && (*retries)++ < STREAM_RETRIES) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return STREAM_STALLED;
        return STREAM_FAILED;
    }
    return 0;
}

/* stream_serve(fd, table, pending, frames, budget_ms, rcodes, gil=False): see the section's
 * comment. `gil`: keep the GIL (a call on the writer's thread, the trio thread: no write
 * can be under way, no lock is taken, and the zones' negative answers are C's too).
 * `pending`: the connection's unread bytes; `frames`: the messages to answer at most
 * (a turn); `budget_ms`: how long to wait for a write to a table under way before
 * handing the message to Python. Returns (state, answered, rest, unsent, key): the
 * STREAM_* state, the messages answered, the unread bytes (for STREAM_MISS the message
 * Python answers first), the responses not yet written (STREAM_STALLED, and STREAM_MISS,
 * which writes none: Python writes them before anything else, with its own answers in
 * one write), and the missed question's key for `learn` (or None).
 * RCODEs of the responses answered are added to `rcodes`. */
static PyObject *stream_serve(PyObject *module, PyObject *args) {
    int fd, frames, budget, gil = 0;
    PyObject *arg, *rcodes;
    Py_buffer pending;
    if (!PyArg_ParseTuple(args, "iO!y*iiO!|p", &fd, &TableType, &arg, &pending, &frames,
                          &budget, &PyList_Type, &rcodes, &gil))
        return NULL;
    const TableObject *t = (const TableObject *)arg; /* the caller's reference keeps it */
    if (fd < 0 || t->slots == NULL || frames < 1 || frames > STREAM_FRAMES || budget < 1 ||
        budget > 60000 || PyList_GET_SIZE(rcodes) != RCODES || pending.len >= STREAM_IN) {
        PyBuffer_Release(&pending);
        PyErr_SetString(PyExc_ValueError,
                        "stream_serve takes a descriptor, an initialised table, the unread "
                        "bytes (less than two messages), 1 to 64 messages a turn, a budget "
                        "of 1 to 60000 ms and the list of 16 RCODE counters");
        return NULL;
    }
    unsigned char *in = PyMem_Malloc(STREAM_IN);
    unsigned char *out = PyMem_Malloc(STREAM_OUT);
    if (in == NULL || out == NULL) {
        PyBuffer_Release(&pending);
        PyMem_Free(in);
        PyMem_Free(out);
        return PyErr_NoMemory();
    }
    size_t have = (size_t)pending.len;
    memcpy(in, pending.buf, have);
    PyBuffer_Release(&pending);
    unsigned long long sent[RCODES] = {0};
    unsigned char key[KEY_MAX];
    size_t key_len = 0, start = 0, queued = 0, written = 0;
    unsigned answered = 0, retries = 0, reads = 0;
    int state;
    long long deadline = monotonic_ns() + (long long)budget * 1000000LL;
    PyThreadState *released = gil ? NULL : PyEval_SaveThread();
    for (;;) { /* bounded: each pass answers a message or reads, `frames` and one read */
        /* every whole message buffered, up to the turn's, answered under one lock */
        state = -1;
        if (have - start >= 2 && have - start >= 2 + ((size_t)in[start] << 8 | in[start + 1])) {
            if (!gil && !read_lock_until(deadline)) {
                state = STREAM_MISS;
            } else {
                while (state < 0) {
                    size_t size = (size_t)in[start] << 8 | in[start + 1];
                    if (t->retired || have - start < 2 + size) break;
                    unsigned char *slot = out + queued;
                    Py_ssize_t n = answer_stream(t, in + start + 2, size, slot + 2, key,
                                                 &key_len, !gil);
                    if (n < 0) {
                        state = STREAM_MISS;
                        break;
                    }
                    slot[0] = (unsigned char)(n >> 8);
                    slot[1] = (unsigned char)n;
                    sent[slot[5] & 0x0F]++;
                    queued += 2 + (size_t)n;
                    start += 2 + size;
                    if (++answered == (unsigned)frames) state = STREAM_TURN;
                }
                int retired = t->retired;
                if (!gil) read_unlock();
                if (state < 0 && retired && have - start >= 2 &&
                    have - start >= 2 + ((size_t)in[start] << 8 | in[start + 1]))
                    state = STREAM_MISS; /* a whole message left: Python's */
            }
        }
        if (state == STREAM_MISS) break; /* Python writes C's answers with its own */
        key_len = 0;
        int wrote = stream_write(fd, out, queued, &written, &retries);
        if (wrote) {
            state = wrote;
            break;
        }
        queued = written = 0;
        if (state >= 0) break;
        /* nothing whole left: read what is there now */
        if (start) {
            memmove(in, in + start, have - start);
            have -= start;
            start = 0;
        }
        if (++reads > STREAM_READS) {
            state = STREAM_WAIT; /* Python waits for the socket: at once if it has more */
            break;
        }
        size_t room = STREAM_IN - have;
        ssize_t got = recv(fd, in + have, room < STREAM_READ ? room : STREAM_READ,
                           MSG_DONTWAIT);
        if (got > 0) {
            have += (size_t)got;
            continue;
        }
        if (got == 0) {
            state = STREAM_EOF;
        } else if (errno == EINTR && retries++ < STREAM_RETRIES) {
            continue;
        } else {
            state = errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? STREAM_WAIT
                                                                              : STREAM_FAILED;
        }
        break;
    }
    if (released != NULL) PyEval_RestoreThread(released);
    PyObject *result = NULL;
    if (count_sent(rcodes, sent) == 0)
        result = Py_BuildValue("(iIy#y#y#)", state, answered, (const char *)in + start,
                               (Py_ssize_t)(have - start), (const char *)out + written,
                               (Py_ssize_t)(state == STREAM_STALLED || state == STREAM_MISS
                                                ? queued - written : 0),
                               key_len ? (const char *)key : NULL, (Py_ssize_t)key_len);
    PyMem_Free(in);
    PyMem_Free(out);
    return result;
}

/* The shard of `key` in an owner table's shards (args[0]), or NULL with TypeError: the
 * answer path's own probes (answer/_lookup.py), one call instead of hash, mask, index
 * and get in Python. */
static PyObject *owner_shard(PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "(shards, key): shards a tuple of 2**k dicts");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
    if (n < 1 || (n & (n - 1))) {
        PyErr_SetString(PyExc_TypeError, "an owner table has 2**k shards");
        return NULL;
    }
    PyObject *shard;
    if (n == 1) {
        shard = PyTuple_GET_ITEM(args[0], 0);
    } else {
        Py_hash_t hash = PyObject_Hash(args[1]);
        if (hash == -1) return NULL;
        shard = PyTuple_GET_ITEM(args[0], (size_t)hash & (size_t)(n - 1));
    }
    if (!PyDict_CheckExact(shard)) {
        PyErr_SetString(PyExc_TypeError, "an owner table's shard is a dict");
        return NULL;
    }
    return shard;
}

static PyObject *owner_get(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    PyObject *shard = owner_shard(args, nargs);
    if (shard == NULL) return NULL;
    PyObject *value = PyDict_GetItemWithError(shard, args[1]);
    if (value != NULL) return Py_NewRef(value);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *owner_has(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    PyObject *shard = owner_shard(args, nargs);
    if (shard == NULL) return NULL;
    int held = PyDict_Contains(shard, args[1]);
    if (held < 0) return NULL;
    return PyBool_FromLong(held);
}

static PyObject *module_write_begin(PyObject *module, PyObject *Py_UNUSED(ignored)) {
    (void)module;
    write_begin();
    Py_RETURN_NONE;
}

static PyObject *module_write_end(PyObject *module, PyObject *Py_UNUSED(ignored)) {
    (void)module;
    if (write_depth < 1) {
        PyErr_SetString(PyExc_RuntimeError, "write_end without write_begin");
        return NULL;
    }
    write_end();
    Py_RETURN_NONE;
}

/* The kernel's sched_attr as far as SCHED_ATTR_SIZE_VER0 (glibc declares no wrapper). */
typedef struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
} SchedAttr;

static PyObject *module_time_slice(PyObject *module, PyObject *arg) {
    (void)module;
    unsigned long long ns = PyLong_AsUnsignedLongLong(arg);
    if (ns == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0); /* Linux: the calling thread's */
    if (nice == -1 && errno) Py_RETURN_FALSE;
    SchedAttr attr = {.size = sizeof(SchedAttr), .policy = SCHED_OTHER, .nice = nice,
                      .runtime = ns};
    return PyBool_FromLong(syscall(SYS_sched_setattr, 0, &attr, 0) == 0);
}

static PyMethodDef module_methods[] = {
    {"write_begin", (PyCFunction)module_write_begin, METH_NOARGS,
     "write_begin(): the writer's changes to tables from here to write_end are one write: "
     "no worker reads a table in between (fastpath.writing)."},
    {"write_end", (PyCFunction)module_write_end, METH_NOARGS,
     "write_end(): end the write write_begin began (they nest)."},
    {"time_slice", (PyCFunction)module_time_slice, METH_O,
     "time_slice(ns): ask the kernel for time slices of ns nanoseconds (0: its default) for "
     "the calling thread and the threads it starts later (sched_setattr's runtime for "
     "SCHED_OTHER, Linux 6.12 on; older kernels ignore it); whether the call succeeded."},
    {"owner_get", (PyCFunction)(void (*)(void))owner_get, METH_FASTCALL,
     "owner_get(shards, key): key's value in an owner table's shards, or None."},
    {"owner_has", (PyCFunction)(void (*)(void))owner_has, METH_FASTCALL,
     "owner_has(shards, key): whether an owner table's shards hold key."},
    {"stream_serve", (PyCFunction)stream_serve, METH_VARARGS,
     "stream_serve(fd, table, pending, frames, budget_ms, rcodes, gil=False): answer a TCP "
     "connection's queries the table holds until one is Python's; (state, answered, rest, "
     "unsent, key)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "valis_core.dns.answer._fastpath",
    .m_doc = "The compiled UDP fast path (valis_core.dns.answer.fastpath).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&TableType) < 0 || PyType_Ready(&PumpType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Table", (PyObject *)&TableType) < 0 ||
        PyModule_AddObjectRef(m, "Pump", (PyObject *)&PumpType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_BATCH", MAX_BATCH) < 0 ||
        PyModule_AddIntConstant(m, "STREAM_FRAMES", STREAM_FRAMES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
