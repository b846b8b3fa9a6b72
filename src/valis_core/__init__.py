"""valis: an authoritative DNS origin node served live from operator-state PostgreSQL.

Pure cores (argv, fence, manifest, site facts, launcher config, DNS answering) take
values and return values; IO lives in thin trio shells around them.

The library's supported surface is what each package's ``__init__`` exports (its
``__all__``): ``valis_core.dns``, ``valis_core.store``, ``valis_core.ops``,
``valis_core.operator_state``, ``valis_core.resident``, ``valis_core.identity``,
``valis_core.owner``, ``valis_core.apply``, and the modules ``valis_core.fence``,
``valis_core.launch``, ``valis_core.launcher_config``, ``valis_core.state_layout`` and
``valis_core.dns.answer``.
Anything reached by a deeper path is internal and may change. See docs/library.md.
"""

from valis_core.errors import ValisError

__version__ = "0.1.0"

__all__ = ["ValisError", "__version__"]
