"""Kill trials: a verb SIGKILLed at a random point, what it left judged, then run again.

One trial prepares a fresh target (holding the old version of what the verb writes, or
nothing), starts the verb in a driver process that has already imported everything, tells
it to go, and SIGKILLs its process group after a delay drawn from a seeded RNG over the
verb's measured duration. Then every file the verb writes must be absent, the old
version or the complete new version, read back with valis's own readers; a temporary
file or directory it left is tolerated only if the next run of the verb removes it; and
that next run must complete. ``tests/scenario/test_kill_campaign.py`` runs a handful of
trials per verb, ``benchmarks/kill_campaign.py`` two hundred.

A verb that stays to supervise its unit (condense) runs in a PID namespace of its own
(``unshare --pid``), so a kill takes the unit and its resident down with it, as a crash
of the host would; it is done when it says it condensed, and then stopped with SIGTERM.

A kill "lands mid-verb" when the driver had been told to go and had not yet reported the
verb done: the verb was running when it died.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import random
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from tests.scenario import kill_targets
from tests.scenario.kill_targets import FACTS_NEW, FACTS_OLD
from tests.scenario.loopback_serve import free_port
from tests.scenario.module_dist import HELLO, HELLO_ENTRY, HELLO_SOURCE, pin_of, publish
from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import PgCluster, runtime_bin
from tests.scenario.resident_harness import resident_runtime, site_facts
from tests.scenario.setpriv_launcher import LAUNCHER
from valis_cli.main import COMMAND_MODULES
from valis_core.apply.delivery import (
    CURRENT_LINK,
    VERSIONS_DIR,
    DeliveryManifest,
    assert_delivery_sound,
    build_delivery,
)
from valis_core.dns import parse_zone_text
from valis_core.identity.custody import KEYFILE_NAME, load_keyfile, load_or_create_keyfile
from valis_core.identity.instance import read_instance
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.site_facts import parse_site_facts
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.operator_state.zones import delete_zone, export_zone_text, replace_zone
from valis_core.ops.backup import create_backup, verify_backup_set
from valis_core.plugin.install import condense_modules
from valis_core.plugin.installed import INSTALLED_RECORD, installed_record, modules_dir
from valis_core.plugin.wheel import make_wheel, read_wheel
from valis_core.state_layout import config_store_path, fabric_info_path, keyfile_path
from valis_core.store.head import head_path, materialise_genesis, read_store_head
from valis_core.store.manifest import dumps, make_default_manifest

REPO = Path(__file__).resolve().parents[2]
TARGETS = kill_targets.__name__
READY_TIMEOUT = 60.0
VERB_TIMEOUT = 120.0
REAP_TIMEOUT = 10.0
STOP_ATTEMPTS = 100
STOP_INTERVAL = 0.05
DELAY_SPAN = 1.25
"""Kill delays are drawn over this multiple of the verb's measured duration, so most
kills land inside the verb and some just after it."""

# The driver: import the target (and what it imports lazily), say ready, wait for "go",
# run it, say done. A command line target runs as its entry point runs it, so an operator
# error ends in the one line an operator sees, and only a real crash in a traceback.
DRIVER = r"""
import importlib, json, os, sys
module, _, name = sys.argv[1].partition(":")
target = getattr(importlib.import_module(module), name)
args = json.loads(sys.argv[2])
prog = sys.argv[4]
if prog:
    from valis_core.command_line import run_reported
    entry = target
    target = lambda argv: run_reported(prog, entry, argv)
for preload in json.loads(sys.argv[3]):
    try:
        importlib.import_module(preload)
    except ModuleNotFoundError:
        pass
os.write(1, b"ready\n")
if os.read(0, 1) != b"g":
    sys.exit(3)
status = target(args)
os.write(1, b"done\n")
sys.exit(status if isinstance(status, int) else 0)
"""


class TrialError(Exception):
    """The campaign itself could not run a trial (a driver that never became ready)."""


@attrs.frozen
class Command:
    """What a verb runs: ``target`` (``module:function``) called with ``args``; as
    ``user`` (the run account, under setpriv) when given, else as this process."""

    target: str
    args: tuple[str, ...]
    user: str | None = None
    preload: tuple[str, ...] = ()
    """Modules the target imports only when called, imported before "go"."""
    done: bytes = b"done\n"
    """The line (its start) by which the verb says it has done its work."""
    supervises: bool = False
    """The verb stays in the foreground after it is done (supervising a unit) until it
    is sent SIGTERM; it runs in a PID namespace of its own, so a kill takes the unit
    down with it."""
    prog: str = ""
    """The program whose command line ``target`` runs (its errors reported as that
    program's entry point reports them), or empty for a library call."""


CLI_PRELOAD = (
    *COMMAND_MODULES,
    "valis_core.apply.delivery",
    "valis_core.apply.unit_control",
    "valis_core.operator_state.connection",
    "valis_core.operator_state.zones",
    "valis_core.ops.backup",
    "valis_core.ops.condense",
    "valis_core.ops.condense_host",
    "valis_core.ops.local_probe",
)
"""What the commands import inside their handlers (a name gone is skipped)."""


def cli(*argv: str, user: str | None = None) -> Command:
    """``valis ARGV``, with what the command imports imported before "go"."""
    return Command("valis_cli.main:run", argv, user, CLI_PRELOAD, prog="valis")


@attrs.frozen
class TrialResult:
    landed_mid_verb: bool
    problems: tuple[str, ...]
    """Files found partial or corrupt, temporaries the next run left behind, a next run
    that failed: anything that makes the trial a loss."""
    temporaries: int
    """Temporaries the kill left that the next run swept."""
    rerun_completed: bool


@attrs.frozen
class Tally:
    """One verb's row of the campaign table."""

    verb: str
    trials: int
    landed: int
    partial: int
    swept: int
    reruns: int
    duration: float
    problems: tuple[str, ...]


class Verb(Protocol):
    """One durable-writing verb under the kill campaign."""

    name: str

    def prepare(self, work: Path) -> None:
        """Make ``work`` a fresh target holding the old version of what the verb writes."""

    def command(self, work: Path) -> Command:
        """The verb writing the new version into ``work``."""

    def judge(self, work: Path) -> list[str]:
        """Problems with what the verb writes: each must be absent, old, or whole and new."""

    def temporaries(self, work: Path) -> list[Path]:
        """Temporary files or directories the verb may leave behind in ``work``."""

    def judge_complete(self, work: Path) -> list[str]:
        """Problems after a run that completed: the whole new version must be in place."""


# -- running a driver -------------------------------------------------------------------


def _argv(command: Command) -> tuple[list[str], dict[str, str], str]:
    script = [
        command.target, json.dumps(list(command.args)), json.dumps(list(command.preload)),
        command.prog,
    ]
    if command.user is None:
        namespace = ["unshare", "--pid", "--fork", "--kill-child"] if command.supervises else []
        return [*namespace, sys.executable, "-c", DRIVER, *script], dict(os.environ), str(REPO)
    account = pwd.getpwnam(command.user)
    python = runtime_bin() / "python"
    env = {"PATH": f"{runtime_bin()}:/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C.UTF-8"}
    argv = [
        "setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
        "--", str(python), "-c", DRIVER, *script,
    ]
    return argv, env, "/"


def _read_line(stream: int, timeout: float) -> bytes:
    """One line from a pipe within ``timeout`` seconds (b"" at end of file or timeout)."""
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            return line
        byte = os.read(stream, 1)
        if not byte:
            return line
        line += byte
    return line


class _Driver:
    """A driver process started and ready to run its verb."""

    def __init__(self, command: Command) -> None:
        argv, env, cwd = _argv(command)
        self.command = command
        # A file, not a pipe: a unit the verb starts inherits it and may log plenty.
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
            env=env, cwd=cwd, start_new_session=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdin is not None
        self.stdout = self.process.stdout.fileno()
        if _read_line(self.stdout, READY_TIMEOUT) != b"ready\n":
            self.kill()
            raise TrialError(f"{command.target} never became ready: {self.stderr()}")

    def go(self) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(b"g")
        self.process.stdin.flush()
        return time.monotonic()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(REAP_TIMEOUT)

    def wait_done(self, timeout: float) -> bool:
        """Read lines until the verb says it is done (False at end of output or timeout)."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            line = _read_line(self.stdout, remaining)
            if not line.endswith(b"\n"):
                return False
            if line.startswith(self.command.done):
                return True
        return False

    def finished(self) -> bool:
        """Whether the driver had reported its verb done (what it wrote after "go")."""
        rest = b""
        for _ in range(1000):
            if not select.select([self.stdout], [], [], 0)[0]:
                break
            chunk = os.read(self.stdout, 4096)
            if not chunk:
                break
            rest += chunk
        return any(line.startswith(self.command.done) for line in rest.splitlines(True))

    def stop(self) -> None:
        """SIGTERM the verb itself, once: the first process of its PID namespace (the
        child of ``unshare``), which takes a signal only once it has a handler for it,
        so the signal waits for the handler."""
        pid = self.process.pid
        verb = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
        for _ in range(STOP_ATTEMPTS):
            if _catches(verb, signal.SIGTERM):
                os.kill(verb, signal.SIGTERM)
                return
            time.sleep(STOP_INTERVAL)
        raise TrialError(f"{self.command.target} never set a handler for SIGTERM")

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode("utf-8", "replace").strip()[-2000:]

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self.errors.close()


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def run_to_completion(command: Command) -> tuple[int, float, str]:
    """Run the verb whole: its exit status, seconds from "go" to the verb reporting done
    (not counting the interpreter's exit), and its stderr."""
    driver = _Driver(command)
    try:
        started = driver.go()
        done = driver.wait_done(VERB_TIMEOUT)
        seconds = time.monotonic() - started
        try:
            if done and command.supervises:
                driver.stop()
            status = driver.process.wait(VERB_TIMEOUT if done else REAP_TIMEOUT)
        except (subprocess.TimeoutExpired, OSError, IndexError, TrialError):
            driver.kill()
            return -1, seconds, f"did not finish: {driver.stderr()}"
        return status, seconds, driver.stderr()
    finally:
        driver.close()


def kill_after(command: Command, delay: float) -> bool:
    """Start the verb, SIGKILL its process group ``delay`` seconds after "go"; whether
    the kill landed mid-verb."""
    driver = _Driver(command)
    try:
        started = driver.go()
        remaining = started + delay - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        alive = driver.process.poll() is None
        driver.kill()
        return alive and not driver.finished()
    finally:
        driver.close()


def trial(verb: Verb, work: Path, delay: float) -> TrialResult:
    """One kill of ``verb`` after ``delay`` seconds, judged, then the re-run judged."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o755, parents=True)
    verb.prepare(work)
    command = verb.command(work)
    landed = kill_after(command, delay)
    problems = [f"after the kill: {problem}" for problem in verb.judge(work)]
    left = verb.temporaries(work)
    status, _, stderr = run_to_completion(command)
    completed = status == 0
    if not completed:
        problems.append(f"the re-run failed (status {status}): {stderr}")
    else:
        problems.extend(f"after the re-run: {problem}" for problem in verb.judge_complete(work))
    for path in verb.temporaries(work):
        problems.append(f"the re-run left the temporary {path.relative_to(work)}")
    return TrialResult(landed, tuple(problems), len(left), completed)


def measure(verb: Verb, work: Path, runs: int) -> float:
    """The verb's median duration over ``runs`` uninterrupted runs (each one judged)."""
    durations = []
    for _ in range(runs):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(mode=0o755, parents=True)
        verb.prepare(work)
        status, seconds, stderr = run_to_completion(verb.command(work))
        if status != 0:
            raise TrialError(f"{verb.name}: an uninterrupted run failed ({status}): {stderr}")
        wrong = verb.judge_complete(work)
        if wrong:
            raise TrialError(f"{verb.name}: an uninterrupted run left {wrong}")
        durations.append(seconds)
    return sorted(durations)[len(durations) // 2]


def campaign(
    verb: Verb, work: Path, trials: int, *, seed: int, budget: float, measure_runs: int = 3
) -> Tally:
    """``trials`` kill trials of ``verb`` (fewer if ``budget`` seconds run out)."""
    deadline = time.monotonic() + budget
    duration = measure(verb, work, measure_runs)
    rng = random.Random(f"{seed}:{verb.name}")
    results = []
    for _ in range(trials):
        if time.monotonic() > deadline:
            break
        results.append(trial(verb, work, rng.uniform(0.0, DELAY_SPAN * duration)))
    shutil.rmtree(work, ignore_errors=True)
    return Tally(
        verb=verb.name,
        trials=len(results),
        landed=sum(result.landed_mid_verb for result in results),
        partial=sum(bool(result.problems) for result in results),
        swept=sum(result.temporaries for result in results),
        reruns=sum(result.rerun_completed for result in results),
        duration=duration,
        problems=tuple(problem for result in results for problem in result.problems),
    )


def table(tallies: Sequence[Tally]) -> str:
    """The campaign's table, one row per verb."""
    header = (
        f"{'verb':<16}{'trials':>7}{'mid-verb':>10}{'partial/corrupt':>17}"
        f"{'re-runs ok':>12}{'temps swept':>13}{'verb ms':>9}"
    )
    rows = [
        f"{t.verb:<16}{t.trials:>7}{t.landed:>10}{t.partial:>17}{t.reruns:>12}"
        f"{t.swept:>13}{t.duration * 1000:>9.1f}"
        for t in tallies
    ]
    return "\n".join([header, *rows])


# -- the verbs --------------------------------------------------------------------------


def _matching(directory: Path, pattern: str) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(directory.glob(pattern))


class Mint:
    """The owner seed minted on a first boot (``custody.load_or_create_keyfile``)."""

    name = "owner-seed mint"

    def __init__(self) -> None:
        self._seen: dict[Path, bytes] = {}

    def prepare(self, work: Path) -> None:
        (work / "state").mkdir(mode=0o700)
        self._seen.pop(work, None)

    def command(self, work: Path) -> Command:
        return Command(f"{TARGETS}:mint", (str(work / "state"),))

    def judge(self, work: Path) -> list[str]:
        path = work / "state" / KEYFILE_NAME
        if not path.exists():
            return []
        try:
            self._seen[work] = load_keyfile(work / "state").private_bytes_raw()
        except Exception as exc:
            return [f"{KEYFILE_NAME} is not a whole seed: {exc}"]
        return []

    def temporaries(self, work: Path) -> list[Path]:
        return _matching(work / "state", f".{KEYFILE_NAME}.*")

    def judge_complete(self, work: Path) -> list[str]:
        try:
            seed = load_keyfile(work / "state").private_bytes_raw()
        except Exception as exc:
            return [f"no whole seed: {exc}"]
        before = self._seen.get(work)
        if before is not None and before != seed:
            return ["the seed the killed run minted was replaced"]
        return []


class SiteFacts:
    """The site-facts file rewritten over the previous one (``write_site_facts``)."""

    name = "site-facts write"
    file = "site-facts.env"

    def prepare(self, work: Path) -> None:
        write_site_facts(work / self.file, FACTS_OLD)

    def command(self, work: Path) -> Command:
        return Command(f"{TARGETS}:write_facts", (str(work / self.file),))

    def _facts(self, work: Path) -> dict[str, str] | str:
        try:
            return parse_site_facts((work / self.file).read_text("utf-8"))
        except Exception as exc:
            return f"{self.file} is unreadable: {exc}"

    def judge(self, work: Path) -> list[str]:
        facts = self._facts(work)
        if isinstance(facts, str):
            return [facts]
        return [] if facts in (FACTS_OLD, FACTS_NEW) else [f"{self.file} holds other facts"]

    def temporaries(self, work: Path) -> list[Path]:
        return _matching(work, f".{self.file}.*")

    def judge_complete(self, work: Path) -> list[str]:
        facts = self._facts(work)
        if isinstance(facts, str):
            return [facts]
        return [] if facts == FACTS_NEW else [f"{self.file} does not hold the new facts"]


class StoreHead:
    """The genesis store head written before a first boot (``materialise_genesis``)."""

    name = "store-head write"

    def prepare(self, work: Path) -> None:
        (work / "state").mkdir(mode=0o700)

    def command(self, work: Path) -> Command:
        return Command(f"{TARGETS}:genesis", (str(work / "state"),))

    def judge(self, work: Path) -> list[str]:
        try:
            head = read_store_head(work / "state")
        except Exception as exc:
            return [f"the store head is unreadable: {exc}"]
        if head is not None and dumps(head) != dumps(make_default_manifest()):
            return ["the store head is not the genesis manifest"]
        return []

    def temporaries(self, work: Path) -> list[Path]:
        return _matching(head_path(work / "state").parent, ".*")

    def judge_complete(self, work: Path) -> list[str]:
        try:
            head = read_store_head(work / "state")
        except Exception as exc:
            return [f"the store head is unreadable: {exc}"]
        if head is None or dumps(head) != dumps(make_default_manifest()):
            return ["the store head is not the genesis manifest"]
        return []


class Backup:
    """``valis backup create`` over an older archive of another node."""

    name = "backup create"
    archive = "backup.tar"

    def __init__(self, scratch: Path) -> None:
        self._old = scratch / "old-state"
        self._new = scratch / "new-state"
        for state in (self._old, self._new):
            state.mkdir(mode=0o700, parents=True)
            load_or_create_keyfile(state)
            materialise_genesis(state)
            config = state / "config"
            config.mkdir(mode=0o700)
            for n in range(40):
                (config / f"fact-{n:02}").write_bytes(os.urandom(4096))
        self._keys = {
            state: load_keyfile(state).public_key().public_bytes_raw().hex()
            for state in (self._old, self._new)
        }

    def prepare(self, work: Path) -> None:
        create_backup(self._old, work / self.archive)

    def command(self, work: Path) -> Command:
        out = str(work / self.archive)
        argv = ("backup", "create", "--state-dir", str(self._new), "--out", out)
        return cli(*argv)

    def _owner(self, work: Path) -> str | None:
        return verify_backup_set(work / self.archive).owner_public_key

    def judge(self, work: Path) -> list[str]:
        if not (work / self.archive).exists():
            return [f"{self.archive} vanished (the old archive must stay until replaced)"]
        try:
            owner = self._owner(work)
        except Exception as exc:
            return [f"{self.archive} is not a restorable backup set: {exc}"]
        return [] if owner in self._keys.values() else [f"{self.archive} is another node's"]

    def temporaries(self, work: Path) -> list[Path]:
        return _matching(work, f".{self.archive}.*")

    def judge_complete(self, work: Path) -> list[str]:
        try:
            owner = self._owner(work)
        except Exception as exc:
            return [f"{self.archive} is not a restorable backup set: {exc}"]
        return [] if owner == self._keys[self._new] else [f"{self.archive} is the old archive"]


def _module_wheel(version: str) -> tuple[str, bytes]:
    files = [("valis_hello/__init__.py", HELLO_SOURCE)]
    files += [(f"valis_hello/data/part{n:02}.txt", os.urandom(8192)) for n in range(30)]
    return make_wheel(HELLO, version, files, requires=["trio>=0.25"], entry_points=HELLO_ENTRY)


class Modules:
    """The pinned modules installed over the previous version (``condense_modules``)."""

    name = "module install"

    def __init__(self, scratch: Path) -> None:
        wheels = {version: _module_wheel(version) for version in ("1.0", "2.0")}
        self._index = publish(scratch / "dist", *wheels.values())
        self._pins = {v: pin_of(HELLO, v, wheel) for v, wheel in wheels.items()}
        self._files = {
            v: dict(read_wheel(wheels[v][1], self._pins[v]).files) for v in wheels
        }
        self._template = scratch / "template"
        (self._template / "state").mkdir(mode=0o700, parents=True)
        condense_modules(self._template / "state", [self._pins["1.0"]], self._index)

    def prepare(self, work: Path) -> None:
        shutil.copytree(self._template / "state", work / "state", symlinks=True)

    def command(self, work: Path) -> Command:
        pin = self._pins["2.0"]
        args = (str(work / "state"), self._index, pin.name, pin.version, pin.sha256)
        return Command(f"{TARGETS}:install", args)

    def _version(self, work: Path) -> str | None:
        """The whole installed version, or None when there is no modules directory."""
        target = modules_dir(work / "state")
        if not target.exists():
            return None
        record = (target / INSTALLED_RECORD).read_bytes()
        for version, pin in self._pins.items():
            if record == installed_record([pin]):
                present = {
                    str(p.relative_to(target)) for p in target.rglob("*") if not p.is_dir()
                }
                if present != {*self._files[version], INSTALLED_RECORD}:
                    raise ValueError(f"version {version} is installed with other files")
                for relative, data in self._files[version].items():
                    if (target / relative).read_bytes() != data:
                        raise ValueError(f"{relative} of version {version} is torn")
                return version
        raise ValueError("the install record names neither version")

    def judge(self, work: Path) -> list[str]:
        try:
            self._version(work)
        except Exception as exc:
            return [f"the modules directory is not a whole install: {exc}"]
        return []

    def temporaries(self, work: Path) -> list[Path]:
        return _matching(work / "state", ".modules-*")

    def judge_complete(self, work: Path) -> list[str]:
        try:
            version = self._version(work)
        except Exception as exc:
            return [f"the modules directory is not a whole install: {exc}"]
        return [] if version == "2.0" else [f"version {version} is installed, not 2.0"]


ZONE = "kill.example."


def _zone_text(serial: int, records: int) -> str:
    extra = "".join(f"h{n} IN A 198.51.100.{n % 250 + 1}\n" for n in range(records))
    return soa_zone(ZONE, serial=serial, extra=extra)


def _record_set(text: str) -> frozenset[tuple[str, str, int, str]]:
    return frozenset(
        (row.owner.lower(), row.rtype, row.ttl, row.rdata) for row in parse_zone_text(text, None)
    )


class ZoneImport:
    """``valis zone import`` of a new zone over the old one, as the run account."""

    name = "zone import"

    def __init__(self, pg: PgCluster, dsn: str, shared: Path) -> None:
        self._pg = pg
        self._dsn = dsn
        self._old = _zone_text(1, 500)
        self._new = _zone_text(2, 3000)
        self._file = shared / "kill.example.zone"
        self._file.write_text(self._new)
        self._file.chmod(0o644)
        self._sets = {1: _record_set(self._old), 2: _record_set(self._new)}

    def prepare(self, work: Path) -> None:
        # The old zone anew, at its own serial: written over the last trial's new zone it
        # would be another version of it, which the change journal gives a higher serial.
        with self._pg.connect(self._dsn) as conn:
            delete_zone(conn, ZONE)
            replace_zone(conn, parse_zone_text(self._old, None))

    def command(self, work: Path) -> Command:
        return cli("zone", "import", "--dsn", self._dsn, str(self._file), user=self._pg.run_user)

    def _serial(self) -> int | None:
        with self._pg.connect(self._dsn) as conn:
            found = _record_set(export_zone_text(conn, ZONE))
        for serial, records in self._sets.items():
            if found == records:
                return serial
        return None

    def judge(self, work: Path) -> list[str]:
        return [] if self._serial() is not None else ["the zone is a mixture of old and new"]

    def temporaries(self, work: Path) -> list[Path]:
        return []

    def judge_complete(self, work: Path) -> list[str]:
        return [] if self._serial() == 2 else ["the zone is not the new import"]


# The unit a delivery carries: says READY=1, stays up briefly, exits 0.
UNIT = b"""\
import os, socket, time
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
    notify.sendto(b"READY=1", os.environ["NOTIFY_SOCKET"])
time.sleep(0.2)
"""


class Apply:
    """``valis apply --supervise`` of a new delivery over the version serving."""

    name = "apply"

    def __init__(self, scratch: Path) -> None:
        self._tarballs = {}
        self._manifests: dict[str, DeliveryManifest] = {}
        for version in ("1.0", "2.0"):
            files: dict[str, bytes | tuple[bytes, int]] = {"bin/unit": (UNIT, 0o755)}
            files.update({f"lib/part{n:02}": os.urandom(32768) for n in range(40)})
            tarball = scratch / f"valis-serving-{version}.tar.gz"
            build_delivery(files, version, tarball)
            self._tarballs[version] = tarball
            self._manifests[version] = assert_delivery_sound(tarball)
        self._template = scratch / "template"
        self._template.mkdir()
        status, _, stderr = run_to_completion(self._apply(self._template, "1.0"))
        if status != 0:
            raise TrialError(f"apply: the first delivery did not apply: {stderr}")

    def _apply(self, work: Path, version: str) -> Command:
        root = work / "root"
        unit = f"{sys.executable} {root / CURRENT_LINK / 'bin' / 'unit'}"
        return cli("apply", "--delivery", str(self._tarballs[version]), "--root", str(root),
                   "--supervise", unit, "--timeout", "30")

    def prepare(self, work: Path) -> None:
        shutil.copytree(self._template / "root", work / "root", symlinks=True)

    def command(self, work: Path) -> Command:
        return self._apply(work, "2.0")

    def _whole(self, directory: Path, version: str) -> bool:
        manifest = self._manifests[version]
        present = {str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir()}
        if present != {entry.path for entry in manifest.files}:
            return False
        return all(
            hashlib.sha256((directory / entry.path).read_bytes()).hexdigest() == entry.sha256
            and (directory / entry.path).stat().st_mode & 0o777 == entry.mode
            for entry in manifest.files
        )

    def _current(self, work: Path) -> tuple[str | None, list[str]]:
        root = work / "root"
        problems = []
        for entry in sorted((root / VERSIONS_DIR).iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.name not in self._manifests or not self._whole(entry, entry.name):
                problems.append(f"{VERSIONS_DIR}/{entry.name} is not a whole version")
        link = root / CURRENT_LINK
        if not link.is_symlink():
            return None, [*problems, f"{CURRENT_LINK} is missing"]
        target = os.readlink(link)
        version = Path(target).name
        if target != f"{VERSIONS_DIR}/{version}" or version not in self._manifests:
            return None, [*problems, f"{CURRENT_LINK} points at {target}"]
        if not (root / target).is_dir():
            problems.append(f"{CURRENT_LINK} points at a missing {target}")
        return version, problems

    def judge(self, work: Path) -> list[str]:
        return self._current(work)[1]

    def temporaries(self, work: Path) -> list[Path]:
        root = work / "root"
        return _matching(root, ".*") + _matching(root / VERSIONS_DIR, ".*")

    def judge_complete(self, work: Path) -> list[str]:
        version, problems = self._current(work)
        return problems if version == "2.0" else [*problems, f"{version} is current, not 2.0"]


VERB_NAMES = (
    "mint", "site-facts", "store-head", "backup", "modules", "zone-import", "apply", "condense"
)


class Condense:
    """``valis condense --genesis`` onto an empty state directory, supervising the unit
    (a launcher stand-in handing a loopback DNS pair to the resident, as the condense
    scenarios run it); each trial against a fresh operator-state database."""

    name = "condense"

    def __init__(self, pg: PgCluster, shared: Path) -> None:
        self._pg = pg
        self._state = shared / "state"
        self._port = 0
        self._seen: dict[Path, bytes] = {}

    def prepare(self, work: Path) -> None:
        dsn = self._pg.new_database("condense")
        with self._pg.connect(dsn) as conn:
            migrate(conn)
            replace_zone(conn, parse_zone_text(soa_zone(CONDENSE_ZONE), CONDENSE_ZONE))
        write_site_facts(work / "site-facts.env", site_facts(dsn, CONDENSE_ZONE))
        shutil.rmtree(self._state, ignore_errors=True)
        account = pwd.getpwnam(self._pg.run_user)
        self._state.mkdir(mode=0o700)
        os.chown(self._state, account.pw_uid, account.pw_gid)
        self._port = free_port()
        self._seen.pop(work, None)

    def command(self, work: Path) -> Command:
        account = pwd.getpwnam(self._pg.run_user)
        unit = shlex.join([
            sys.executable, "-c", LAUNCHER, str(self._port), str(self._state),
            str(account.pw_uid), str(account.pw_gid), resident_runtime(),
        ])
        argv = (
            "condense", "--genesis", "--site-facts", str(work / "site-facts.env"),
            "--state-dir", str(self._state), "--unit-command", unit,
            "--dns-address", f"127.0.0.1:{self._port}", "--unsupervised",
            "--binary", resident_runtime(),
            "--pg-socket-dir", str(self._pg.cluster.socket_dir),
            "--pg-port", str(self._pg.cluster.port),
        )
        return attrs.evolve(cli(*argv), done=b"valis: condensed", supervises=True)

    def judge(self, work: Path) -> list[str]:
        problems = []
        reads: tuple[tuple[str, Callable[[], object]], ...] = (
            ("the owner seed", lambda: _seed(self._state)),
            ("the store head", lambda: read_store_head(self._state)),
            ("the configuration store", lambda: _config(self._state)),
            ("the instance token", lambda: read_instance(self._state)),
            ("the fabric's address", lambda: _fabric_info(self._state)),
        )
        for label, read in reads:
            try:
                read()
            except Exception as exc:
                problems.append(f"{label} is not whole: {exc}")
        seed = _seed(self._state) if not problems else None
        if seed is not None:
            self._seen[work] = seed
        return problems

    def temporaries(self, work: Path) -> list[Path]:
        if not self._state.is_dir():
            return []
        return sorted(p for p in self._state.rglob(".*") if not p.name.startswith(".modules"))

    def judge_complete(self, work: Path) -> list[str]:
        before = self._seen.get(work)
        problems = self.judge(work)
        if _seed(self._state) is None or read_store_head(self._state) is None:
            problems.append("the node has no owner seed or no store head")
        elif before is not None and _seed(self._state) != before:
            problems.append("the owner seed the killed condense minted was replaced")
        return problems


CONDENSE_ZONE = "example.test."


def _seed(state: Path) -> bytes | None:
    if not keyfile_path(state).exists():
        return None
    return load_keyfile(state).private_bytes_raw()


def _config(state: Path) -> dict[str, str] | None:
    path = config_store_path(state)
    return parse_site_facts(path.read_text("utf-8")) if path.exists() else None


def _fabric_info(state: Path) -> object:
    path = fabric_info_path(state)
    return json.loads(path.read_text("utf-8")) if path.exists() else None


def make_verb(
    name: str, scratch: Path, shared: Path, pg: PgCluster | None, dsn: str | None
) -> Verb:
    """The verb called ``name``, its fixtures under ``scratch``. ``shared`` is a directory
    the run account can read; ``pg`` and ``dsn`` (a migrated database) are for the zone
    import, the only verb that needs them."""
    scratch.mkdir(parents=True, exist_ok=True)
    if name in ("zone-import", "condense"):
        if pg is None or dsn is None:
            raise TrialError(f"{name} needs a cluster and a migrated database")
        return ZoneImport(pg, dsn, shared) if name == "zone-import" else Condense(pg, shared)
    makers: dict[str, Callable[[], Verb]] = {
        "mint": Mint,
        "site-facts": SiteFacts,
        "store-head": StoreHead,
        "backup": lambda: Backup(scratch),
        "modules": lambda: Modules(scratch),
        "apply": lambda: Apply(scratch),
    }
    return makers[name]()
