"""A private dist on disk for tests: a wheelhouse of small modules, indexed by valis."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from valis_core.plugin.wheel import make_wheel, sha256_hex
from valis_core.plugin.wheelhouse import SIMPLE, write_simple_index
from valis_core.store.manifest import ModulePin

HELLO = "valis-hello"
HELLO_SOURCE = b'''
"""A module that leaves marks in the state directory when it starts and drains."""
import trio


class Hello:
    def __init__(self, context):
        self.context = context

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
        mark = self.context.state_dir / "hello.started"
        mark.write_text(f"{self.context.node} {self.context.generation}\\n")
        task_status.started()
        await trio.sleep_forever()

    async def drain(self):
        (self.context.state_dir / "hello.drained").write_text("drained\\n")


def make(context):
    return Hello(context)
'''
HELLO_ENTRY = "[valis.modules]\nhello = valis_hello:make\n"


def hello_wheel(version: str = "1.0", *, greeting: bytes = b"") -> tuple[str, bytes]:
    return make_wheel(
        HELLO, version, [("valis_hello/__init__.py", HELLO_SOURCE + greeting)],
        requires=["trio>=0.25"], entry_points=HELLO_ENTRY,
    )


def publish(wheelhouse: Path, *wheels: tuple[str, bytes]) -> str:
    """Put ``wheels`` in ``wheelhouse``, index it; the index URL to register."""
    wheelhouse.mkdir(mode=0o755, parents=True, exist_ok=True)
    for name, data in wheels:
        (wheelhouse / name).write_bytes(data)
    write_simple_index(wheelhouse)
    return (wheelhouse / SIMPLE).as_uri() + "/"


def pin_of(name: str, version: str, wheel: tuple[str, bytes]) -> ModulePin:
    return ModulePin(name=name, version=version, sha256=sha256_hex(wheel[1]))


@contextlib.contextmanager
def served_over_http(wheelhouse: Path) -> Iterator[str]:
    """``wheelhouse`` published by a static web server on loopback, over plain http; the
    index URL (``http://127.0.0.1:PORT/simple/``)."""
    wheelhouse.mkdir(mode=0o755, parents=True, exist_ok=True)
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1",
         "--directory", str(wheelhouse), "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        port = re.search(r"port (\d+)", banner)
        assert port is not None, banner
        yield f"http://127.0.0.1:{port.group(1)}/{SIMPLE}/"
    finally:
        server.kill()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()
