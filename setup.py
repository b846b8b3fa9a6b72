"""The compiled UDP fast path (``valis_core.dns.answer._fastpath``), built from its C source.

Everything else about the distribution is in pyproject.toml. ``pip install -e .``
(scripts/bootstrap) builds the extension beside its source; scripts/build builds it in
the tree it freezes (``setup.py build_ext --inplace``). The flags are fixed and carry no
debug information, so equal sources give equal bytes wherever the checkout lives (the
reproducible-build check compares two fresh trees).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "valis_core.dns.answer._fastpath",
            sources=["src/valis_core/dns/answer/_fastpath.c"],
            extra_compile_args=["-O2", "-g0", "-Wall", "-Wextra", "-std=c11", "-D_GNU_SOURCE"],
            extra_link_args=["-g0", "-Wl,--build-id=sha1"],
        )
    ]
)
