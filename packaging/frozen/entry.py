"""The frozen program's entry: ``fulcrum`` when its file is named so, ``valis`` otherwise.

Both executables of the bundle run this script over the same frozen modules; which
command line they are is decided by the executable's own file name, not by ``argv[0]``
(a supervisor may set that to anything).

``valis -c CODE ARG...`` runs CODE as ``python -c`` would: the library re-invokes its own
interpreter that way where it must run a few lines elsewhere (``valis condense
--ask-in-netns`` asks the apex SOA from inside another network namespace), and in the
frozen program ``sys.executable`` is this executable, not a Python.

A module missing from the frozen program can only be a build that left it out (there is
nothing else on the host to import from): that is one line naming it, exit status 1,
like every operator error, rather than a traceback. ``valis assess`` shows that line.
"""

from __future__ import annotations

import os
import sys


def _run_code(code: str, args: list[str]) -> None:
    sys.argv = ["-c", *args]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    sys.exit(0)


def main() -> None:
    name = os.path.basename(sys.executable)
    if name != "fulcrum" and len(sys.argv) > 2 and sys.argv[1] == "-c":
        _run_code(sys.argv[2], sys.argv[3:])
    try:
        if name == "fulcrum":
            from fulcrum.main import main as command
        else:
            from valis_cli.main import main as command
        command()
    except ModuleNotFoundError as exc:
        print(
            f"{name}: this build is incomplete: it cannot import {exc.name}; stage the "
            "serving-capable binary `make build` produces, not a plain core",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
