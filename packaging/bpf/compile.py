"""Compile the sk_lookup steer object from its C source: ``make build`` and the tests.

    python packaging/bpf/compile.py [--out FILE]

The object (default ``build/sk-lookup-catchall.bpf.o``) is what ``make dist`` ships at
``lib/sk-lookup-catchall.bpf.o``, the path the launcher config's
``catchall-object-path`` names, and what fulcrum loads with libbpf. It is compiled with
``clang -target bpf -O2 -g`` (the BTF that ``-g`` emits is what libbpf reads the maps'
layout from) against Debian's ``libbpf-dev`` and kernel headers; the source directory is
mapped to ``.`` in the debug information so equal sources give equal bytes wherever the
checkout lives. The object is written atomically: a failed compile leaves no file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SOURCE = HERE / "sk_lookup_catchall.bpf.c"
OBJECT_NAME = "sk-lookup-catchall.bpf.o"
DEFAULT_OUT = REPO / "build" / OBJECT_NAME
COMPILE_TIMEOUT = 120.0
REMEDY = "install clang and libbpf-dev (`make venv` as root installs them)"


class CompileError(Exception):
    """The steer object could not be compiled; the message says why and what to do."""


def compile_object(out: Path = DEFAULT_OUT, source: Path = SOURCE) -> Path:
    """Compile ``source`` into ``out``; return ``out``."""
    out = Path(os.path.abspath(out))
    clang = shutil.which("clang")
    if clang is None:
        raise CompileError(f"clang not found on PATH; {REMEDY}")
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    includes = [f"-I/usr/include/{multiarch}"] if multiarch else []
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        argv = [
            clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", *includes,
            f"-fdebug-prefix-map={source.parent}=.", "-c", source.name, "-o", partial,
        ]
        try:
            result = subprocess.run(
                argv, cwd=source.parent, capture_output=True, text=True,
                timeout=COMPILE_TIMEOUT, check=False,
            )
        except subprocess.TimeoutExpired:
            raise CompileError(f"clang did not finish within {COMPILE_TIMEOUT:g}s") from None
        if result.returncode != 0:
            raise CompileError(f"compiling {source} failed: {result.stderr.strip()}; {REMEDY}")
        os.chmod(partial, 0o644)
        os.replace(partial, out)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        out = compile_object(args.out)
    except (CompileError, OSError) as exc:
        print(f"bpf: {exc}", file=sys.stderr)
        return 1
    print(f"bpf: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
