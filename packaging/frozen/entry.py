"""The frozen program's entry: ``fulcrum`` when its file is named so, ``valis`` otherwise.

Both executables of the bundle run this script over the same frozen modules; which
command line they are is decided by the executable's own file name, not by ``argv[0]``
(a supervisor may set that to anything).

A module missing from the frozen program can only be a build that left it out (there is
nothing else on the host to import from): that is one line naming it, exit status 1,
like every operator error, rather than a traceback. ``valis assess`` shows that line.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    name = os.path.basename(sys.executable)
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
