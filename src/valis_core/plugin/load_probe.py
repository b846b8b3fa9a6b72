"""The module-load probe (contract §5.1): can this binary take a module at all?

Whether a node can load an installed module is decided when the binary is built: a
module names valis subsystems and the libraries under them, and a node has no source
trees to answer those names from, only what the build froze. ``probe_module_loading``
asks the running program that question the way a node would meet it: a probe module
(built here, a pure-Python wheel) is checked whole and installed by the node's own
installer into a scratch state directory, its requirements checked against the
runtime's distribution metadata; then the resident's own loader imports its entry point,
which reaches past anything valis's entry points import (cryptography's Fernet,
dnspython's DNSSEC and TSIG key ring, the runtime's metadata), and the lifecycle object
it gives is started and drained as the resident would. A build that did not freeze its
subsystems (the known-bad control) fails here, naming the first thing it lacks.

``valis selftest --modules`` runs it against whatever binary is invoked: on a host, the
installed delivery's own.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import attrs
import trio

from valis_core.documents import Document
from valis_core.errors import ValisError
from valis_core.plugin.install import install_checked
from valis_core.plugin.modules import ModuleContext, load_modules
from valis_core.plugin.wheel import make_wheel, read_wheel, sha256_hex
from valis_core.store.manifest import ModulePin

PROBE_PROJECT = "valis-load-probe"
PROBE_VERSION = "1.0"
PROBE_ENTRY = "load-probe"
REACHED = ("cryptography.fernet", "dns.dnssec", "dns.tsigkeyring")
"""What the probe module imports that no entry point of valis does."""
_STARTED = "load-probe.started"
_DRAINED = "load-probe.drained"
_LIFECYCLE_TIMEOUT = 30.0

_SOURCE = '''
"""valis's module-load probe: imports what no valis entry point does, reads the
runtime's distribution metadata, and leaves marks when started and drained."""
import importlib.metadata
import json

import cryptography.fernet
import dns.dnssec
import dns.tsigkeyring
import trio

from valis_core.plugin.install import runtime_versions


class Probe:
    def __init__(self, context):
        self.context = context

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
        report = {
            "trio": importlib.metadata.version("trio"),
            "dnspython": importlib.metadata.version("dnspython"),
            "runtime": len(runtime_versions()),
            "fernet": len(cryptography.fernet.Fernet.generate_key()),
        }
        (self.context.state_dir / "STARTED").write_text(json.dumps(report))
        task_status.started()
        await trio.sleep_forever()

    async def drain(self):
        (self.context.state_dir / "DRAINED").write_text("drained\\n")


def make(context):
    return Probe(context)
'''.replace("STARTED", _STARTED).replace("DRAINED", _DRAINED)


class ModuleLoadProbeError(ValisError):
    """This binary cannot take a module: it was not built to load one."""


@attrs.frozen
class ProbeReport:
    """What the probe module reports when started: the versions and counts it reached."""

    trio: str
    dnspython: str
    runtime: int
    """How many runtime distributions' metadata it read."""
    fernet: int
    """The length of the Fernet key it made."""


REPORT: Document[ProbeReport] = Document(
    kind=ProbeReport,
    name=f"the probe module's {_STARTED}",
    error=ModuleLoadProbeError,
    remedy="the probe module this binary built did not run as built",
    newline=False,
)
"""The probe module's report as a JSON document (``valis_core.documents``); the module
writes it with ``json.dumps``, as a module would."""


def probe_wheel() -> tuple[str, bytes]:
    """The probe module's wheel: its file name and bytes (equal on every call)."""
    return make_wheel(
        PROBE_PROJECT, PROBE_VERSION, [("valis_load_probe/__init__.py", _SOURCE.encode())],
        requires=["trio>=0.25", "dnspython>=2.6", "cryptography"],
        entry_points=f"[valis.modules]\n{PROBE_ENTRY} = valis_load_probe:make\n",
    )


def _refused(problem: object) -> ModuleLoadProbeError:
    return ModuleLoadProbeError(
        f"module-load probe: this binary cannot take a module ({problem}); it was not "
        "built to load one (contract §5.1: the delivery build must freeze every subsystem "
        "with its metadata); rebuild it with make build and deliver that"
    )


async def _start_and_drain(context: ModuleContext, pins: list[ModulePin]) -> ProbeReport:
    (module,) = load_modules(context, pins)
    with trio.fail_after(_LIFECYCLE_TIMEOUT):
        async with trio.open_nursery() as nursery:
            await nursery.start(module.lifecycle.run)
            await module.lifecycle.drain()
            nursery.cancel_scope.cancel()
    report = REPORT.read((context.state_dir / _STARTED).read_bytes())
    if not (context.state_dir / _DRAINED).exists():
        raise _refused("the probe module started but its drain left no mark")
    return report


def probe_module_loading(scratch: Path | None = None) -> str:
    """Install, load, start and drain the probe module in a scratch state directory (under
    ``scratch``, else the system's temporary directory); what was proved, as one line.
    Raises ``ModuleLoadProbeError`` naming what the binary lacks."""
    name, data = probe_wheel()
    pin = ModulePin(name=PROBE_PROJECT, version=PROBE_VERSION, sha256=sha256_hex(data))
    try:
        with tempfile.TemporaryDirectory(prefix="valis-load-probe-", dir=scratch) as root:
            state = Path(root)
            install_checked(state, [pin], [read_wheel(data, pin)])
            context = ModuleContext(state_dir=state, node="load-probe", generation=0)
            report = trio.run(_start_and_drain, context, [pin])
    except ModuleLoadProbeError:
        raise
    except (ValisError, ImportError, OSError, trio.TooSlowError, ExceptionGroup) as exc:
        raise _refused(exc) from exc
    return (
        f"module-load probe: {name} installed, loaded, started and drained; it reached "
        f"{', '.join(REACHED)} and the metadata of {report.runtime} runtime "
        "distributions"
    )
