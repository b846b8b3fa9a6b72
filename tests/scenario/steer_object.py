"""The steer object compiled from packaging/bpf, once per test session.

Compiled by the same script ``make build`` runs, into a directory any account can read
(the run account's load attempt reads it too), removed when the session ends.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPILE = REPO / "packaging" / "bpf" / "compile.py"
COMPILE_TIMEOUT = 180.0


@functools.cache
def steer_object_path() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="valis-steer-", dir="/tmp"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    directory.chmod(0o755)
    out = directory / "sk-lookup-catchall.bpf.o"
    result = subprocess.run(
        [sys.executable, str(COMPILE), "--out", str(out)],
        capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"compiling the steer object failed: {result.stderr.strip()}")
    return out
