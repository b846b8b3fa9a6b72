/* A zone's owner tables, compiled: _owner_tree.c (module functions of _rows.c). */
#ifndef VALIS_OWNER_TREE_H
#define VALIS_OWNER_TREE_H

#include <Python.h>

PyObject *rows_tree(PyObject *module, PyObject *args);
PyObject *rows_shards(PyObject *module, PyObject *args);
PyObject *rows_merge_node(PyObject *module, PyObject *arg);

#endif
