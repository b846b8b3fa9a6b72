/* A table of records read from a master file, in C memory (valis_core.dns.wire._master's
 * RecordTable writes it, valis_core.dns.zone._check's clean_count reads it): what a zone
 * check that finds nothing needs of each record, with no Python object made per record.
 * The table's two bytearrays hold an array of TableRecord and the octets it points into. */
#ifndef VALIS_RECORD_TABLE_H
#define VALIS_RECORD_TABLE_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    Py_ssize_t owner, rdata; /* where the owner (wire form, as written) and rdata start */
    int64_t ttl;
    int32_t owner_len, rdata_len, rtype;
    int32_t line; /* where it starts in the file, from 1; 0 when not told */
} TableRecord;

#endif
