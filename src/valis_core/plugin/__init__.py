"""Modules: the entry-point group valis.modules and their condensing."""
