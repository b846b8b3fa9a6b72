"""The compiled helpers, built from their C sources: the UDP fast path
(``valis_core.dns.answer._fastpath``), the row reader of a bulk zone load
(``valis_core.dns.zone._rows``), the plain lines of a master file
(``valis_core.dns.wire._master``) and the zone check's run over records
(``valis_core.dns.zone._check``).

Everything else about the distribution is in pyproject.toml. ``pip install -e .``
(scripts/bootstrap) builds the extensions beside their sources; scripts/build builds them
in the tree it freezes (``setup.py build_ext``, by packaging/native/compile). The flags
are fixed and carry no debug information, so equal sources give equal bytes wherever the
checkout lives (the reproducible-build check compares two fresh trees).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-g0", "-Wall", "-Wextra", "-std=c11", "-D_GNU_SOURCE"]
LINK = ["-g0", "-Wl,--build-id=sha1"]

setup(
    ext_modules=[
        Extension(
            "valis_core.dns.answer._fastpath",
            sources=["src/valis_core/dns/answer/_fastpath.c"],
            extra_compile_args=FLAGS,
            extra_link_args=LINK,
        ),
        Extension(
            "valis_core.dns.zone._rows",
            sources=[
                "src/valis_core/dns/zone/_rows.c",
                "src/valis_core/dns/zone/_owner_tree.c",
            ],
            depends=["src/valis_core/dns/zone/_owner_tree.h", "src/valis_core/dns/_spans.h"],
            extra_compile_args=FLAGS,
            extra_link_args=LINK,
        ),
        Extension(
            "valis_core.dns.zone._check",
            sources=["src/valis_core/dns/zone/_check.c"],
            depends=["src/valis_core/dns/_record_table.h"],
            extra_compile_args=FLAGS,
            extra_link_args=LINK,
        ),
        Extension(
            "valis_core.dns.wire._master",
            sources=["src/valis_core/dns/wire/_master.c"],
            depends=["src/valis_core/dns/_spans.h", "src/valis_core/dns/_record_table.h"],
            extra_compile_args=FLAGS,
            extra_link_args=LINK,
        ),
    ]
)
