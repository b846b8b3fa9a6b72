"""The resident: ``valis --resident``, the unprivileged node that adopts the descriptors
its launcher bound, brings itself up stage by stage, serves, and fails closed."""
