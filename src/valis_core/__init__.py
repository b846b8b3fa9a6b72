"""valis: an authoritative DNS origin node served live from operator-state PostgreSQL.

Pure cores (argv, fence, manifest, site facts, launcher config, DNS answering) take
values and return values; IO lives in thin trio shells around them.
"""

__version__ = "0.1.0"
