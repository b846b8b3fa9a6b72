"""`valis apply` on a host without systemd: deliveries staged, switched in and rolled back,
with the unit supervised directly and its READY read over a real NOTIFY_SOCKET."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, ensure_system_user
from tests.scenario.proving_ground import process_gone
from valis_cli.commands.apply import reachable_by
from valis_core.apply.delivery import (
    DeliveryError,
    apply_delivery,
    build_delivery,
    build_delivery_bytes,
    current_version,
)
from valis_core.apply.unit_control import ProcessUnitController, SystemdUnitController

UP_TIMEOUT = 20.0

# The unit a delivery carries: says READY=1 with its version, then serves until SIGTERM.
# Given a path, it writes its pid there, and on SIGTERM its pid to PATH.stopped.
GOOD_UNIT = b"""\
import os, pathlib, signal, socket, sys, time
version = (pathlib.Path(__file__).resolve().parent.parent / "VERSION").read_text().strip()
def stop(*_):
    if len(sys.argv) > 1:
        pathlib.Path(sys.argv[1] + ".stopped").write_text(str(os.getpid()))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
if len(sys.argv) > 1:
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
    notify.sendto(f"READY=1\\nSTATUS=serving {version}".encode(), os.environ["NOTIFY_SOCKET"])
for _ in range(6000):
    time.sleep(0.05)
"""

# A version that cannot serve: it exits before ever saying READY.
BAD_UNIT = b"""\
import sys
print("serving codec not available", file=sys.stderr)
sys.exit(1)
"""


def _delivery(directory: Path, version: str, unit: bytes = GOOD_UNIT) -> Path:
    out = directory / f"valis-serving-{version}.tar.gz"
    build_delivery({"bin/unit": (unit, 0o755), "VERSION": version.encode()}, version, out)
    return out


def _tree(root: Path) -> dict[str, object]:
    """Everything under ``root``: file bytes, link targets, directories and modes."""
    seen: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            seen[key] = ("link", os.readlink(path))
        elif path.is_dir():
            seen[key] = ("dir", path.stat().st_mode)
        else:
            seen[key] = ("file", path.read_bytes(), path.stat().st_mode)
    return seen


@pytest.fixture
def unit(tmp_path: Path) -> Iterator[ProcessUnitController]:
    root = tmp_path / "opt-valis"
    command = [sys.executable, str(root / "current" / "bin" / "unit")]
    with ProcessUnitController(command, stop_timeout=5.0) as controller:
        yield controller


def test_a_good_delivery_switches_current_and_restarts_the_unit_on_it(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    first = apply_delivery(_delivery(tmp_path, "1.0.0"), root, unit, timeout=UP_TIMEOUT)
    assert (first.version, first.previous) == ("1.0.0", None)
    assert os.readlink(root / "current") == "versions/1.0.0"
    assert unit.is_up()
    assert unit.status == "serving 1.0.0"
    old_pid = unit.pid

    second = apply_delivery(_delivery(tmp_path, "1.1.0"), root, unit, timeout=UP_TIMEOUT)
    assert (second.version, second.previous) == ("1.1.0", "1.0.0")
    assert current_version(root) == "1.1.0"
    assert unit.is_up()
    assert unit.status == "serving 1.1.0"
    assert unit.pid != old_pid
    assert old_pid is not None
    assert not Path(f"/proc/{old_pid}").exists()
    assert (root / "versions" / "1.1.0" / "bin" / "unit").stat().st_mode & 0o777 == 0o755


def test_the_next_apply_removes_what_a_killed_apply_left(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    apply_delivery(_delivery(tmp_path, "1.0.0"), root, unit, timeout=UP_TIMEOUT)
    staging = root / "versions" / ".1.1.0.0123456789ab.staging"
    (staging / "bin").mkdir(parents=True)
    (staging / "bin" / "unit").write_bytes(GOOD_UNIT[:10])
    link = root / ".current.0123456789ab.tmp"
    link.symlink_to("versions/1.1.0")
    apply_delivery(_delivery(tmp_path, "1.1.0"), root, unit, timeout=UP_TIMEOUT)
    assert current_version(root) == "1.1.0"
    assert sorted(p.name for p in (root / "versions").iterdir()) == ["1.0.0", "1.1.0"]
    assert sorted(p.name for p in root.iterdir()) == ["current", "versions"]


def test_a_version_that_does_not_come_up_is_switched_back_and_the_old_one_restarted(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    apply_delivery(_delivery(tmp_path, "1.0.0"), root, unit, timeout=UP_TIMEOUT)
    with pytest.raises(DeliveryError, match=r"2\.0\.0 did not come up.*1\.0\.0, which came up"):
        apply_delivery(_delivery(tmp_path, "2.0.0", BAD_UNIT), root, unit, timeout=UP_TIMEOUT)
    assert os.readlink(root / "current") == "versions/1.0.0"
    assert unit.is_up()
    assert unit.status == "serving 1.0.0"


def test_a_first_version_that_does_not_come_up_leaves_no_current_and_no_unit(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    with pytest.raises(DeliveryError, match="no previous version"):
        apply_delivery(_delivery(tmp_path, "1.0.0", BAD_UNIT), root, unit, timeout=UP_TIMEOUT)
    assert not (root / "current").is_symlink()
    assert not unit.is_up()
    assert unit.pid is None


def test_a_tampered_delivery_changes_nothing_on_disk_and_leaves_the_unit_running(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    apply_delivery(_delivery(tmp_path, "1.0.0"), root, unit, timeout=UP_TIMEOUT)
    pid = unit.pid
    before = _tree(root)

    good = gzip.decompress(
        build_delivery_bytes("1.1.0", {"bin/unit": (GOOD_UNIT, 0o755), "VERSION": b"1.1.0"})
    )
    members = []
    with tarfile.open(fileobj=io.BytesIO(good)) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member)
            assert handle is not None
            data = handle.read()
            if member.name == "bin/unit":
                data = data.replace(b"serving", b"pwned!!")  # same size, other bytes
            members.append((member, data))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for member, data in members:
            archive.addfile(member, io.BytesIO(data))
    tampered = tmp_path / "valis-serving-1.1.0.tar.gz"
    tampered.write_bytes(gzip.compress(raw.getvalue()))

    with pytest.raises(DeliveryError, match="'bin/unit' has sha256"):
        apply_delivery(tampered, root, unit, timeout=UP_TIMEOUT)
    assert _tree(root) == before
    assert unit.pid == pid
    assert unit.is_up()
    assert unit.status == "serving 1.0.0"


def test_an_unsound_first_delivery_creates_not_even_the_root(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        info = tarfile.TarInfo("bin/unit")
        info.size = len(GOOD_UNIT)
        archive.addfile(info, io.BytesIO(GOOD_UNIT))
    tarball = tmp_path / "no-manifest.tar"
    tarball.write_bytes(raw.getvalue())
    with pytest.raises(DeliveryError, match=r"no MANIFEST\.json"):
        apply_delivery(tarball, root, unit, timeout=UP_TIMEOUT)
    assert not root.exists()
    assert unit.pid is None


def test_reapplying_the_staged_version_reuses_it(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    tarball = _delivery(tmp_path, "1.0.0")
    apply_delivery(tarball, root, unit, timeout=UP_TIMEOUT)
    staged = root / "versions" / "1.0.0"
    inode = staged.stat().st_ino
    again = apply_delivery(tarball, root, unit, timeout=UP_TIMEOUT)
    assert again.previous == "1.0.0"
    assert staged.stat().st_ino == inode
    assert unit.is_up()


def test_a_version_staged_with_other_content_is_refused(
    tmp_path: Path, unit: ProcessUnitController
) -> None:
    root = tmp_path / "opt-valis"
    apply_delivery(_delivery(tmp_path, "1.0.0"), root, unit, timeout=UP_TIMEOUT)
    (root / "versions" / "1.0.0" / "VERSION").write_text("edited by hand")
    with pytest.raises(DeliveryError, match="already exists with other content"):
        apply_delivery(_delivery(tmp_path, "1.0.0"), root, unit, timeout=UP_TIMEOUT)


def test_the_systemd_controller_restarts_and_reads_active_state_through_systemctl(
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls"
    state = tmp_path / "state"
    fake = tmp_path / "systemctl"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        f'case "$1" in restart) echo active > {state};; stop) echo inactive > {state};;\n'
        f'  show) cat {state};; is-active) grep -qx active {state};; esac\n'
    )
    fake.chmod(0o755)
    state.write_text("inactive\n")
    controller = SystemdUnitController("valis-dns.service", systemctl=str(fake))
    assert not controller.is_up()
    controller.restart()
    assert controller.wait_up(5.0)
    assert controller.is_up()
    controller.stop()
    assert not controller.wait_up(5.0)
    assert log.read_text().splitlines() == [
        "is-active --quiet valis-dns.service",
        "daemon-reload",
        "reset-failed valis-dns.service",
        "restart valis-dns.service",
        "show --property=ActiveState --value valis-dns.service",
        "is-active --quiet valis-dns.service",
        "stop valis-dns.service",
        "show --property=ActiveState --value valis-dns.service",
    ]


@contextlib.contextmanager
def supervising(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``valis apply --supervise`` running, past the line saying the unit is serving;
    killed on the way out if still running."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as cli:
        try:
            assert cli.stdout is not None
            line = cli.stdout.readline()  # printed once the unit said READY
            assert line.startswith("valis: 1.0.0 is serving"), line
            yield cli
        finally:
            if cli.poll() is None:
                cli.kill()


def apply_argv(tmp_path: Path, root: Path, marker: Path) -> list[str]:
    tarball = _delivery(tmp_path, "1.0.0")
    unit = f"{sys.executable} {root}/current/bin/unit {marker}"
    valis_bin = Path(sys.executable).parent / "valis"
    return [str(valis_bin), "apply", "--delivery", str(tarball), "--root", str(root),
            "--supervise", unit]


@contextlib.contextmanager
def no_unit_left(marker: Path) -> Iterator[set[int]]:
    """Every unit seen (the pids added to the set) and the last to write its pid to
    ``marker`` are gone afterwards: SIGKILLed if not, so a failing test leaves nothing
    running."""
    seen: set[int] = set()
    try:
        yield seen
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError):
            seen.add(int(marker.read_text()))
        for pid in seen:
            if not process_gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_valis_apply_supervises_the_unit_and_a_stop_signal_stops_it_cleanly(
    tmp_path: Path, open_base: Path, stop: signal.Signals
) -> None:
    # SIGHUP is the operator's terminal gone: the unit runs in a session of its own and
    # would outlive an apply that died of it, unsupervised.
    root = open_base / "opt-valis"  # where the run account, when there is one, reaches it
    marker = tmp_path / "serving"
    with no_unit_left(marker), supervising(apply_argv(tmp_path, root, marker)) as cli:
        unit_pid = int(marker.read_text())
        cli.send_signal(stop)
        assert cli.wait(UP_TIMEOUT) == 0
    assert current_version(root) == "1.0.0"
    assert not Path(f"/proc/{unit_pid}").exists()
    assert Path(f"{marker}.stopped").read_text() == str(unit_pid), "not stopped by SIGTERM"


def test_a_rerun_of_a_lost_apply_stops_the_unit_it_left_then_supervises_its_own(
    tmp_path: Path, open_base: Path
) -> None:
    root = open_base / "opt-valis"
    marker = tmp_path / "serving"
    argv = apply_argv(tmp_path, root, marker)
    with no_unit_left(marker) as seen:
        with supervising(argv) as lost:
            left = int(marker.read_text())
            seen.add(left)
            lost.kill()  # the supervisor lost; its unit, in its own session, runs on
            lost.wait(UP_TIMEOUT)
        assert Path(f"/proc/{left}").exists()
        with supervising(argv) as rerun:
            assert Path(f"{marker}.stopped").read_text() == str(left), (
                "the unit the lost apply left was not stopped by SIGTERM"
            )
            assert process_gone(left)  # its reaper is whoever adopted it; a zombie is gone
            mine = int(marker.read_text())
            assert mine != left
            rerun.send_signal(signal.SIGTERM)
            assert rerun.wait(UP_TIMEOUT) == 0
        assert not Path(f"/proc/{mine}").exists()


def test_a_second_supervisor_of_a_supervised_unit_is_refused_naming_the_first(
    tmp_path: Path, open_base: Path
) -> None:
    root = open_base / "opt-valis"
    marker = tmp_path / "serving"
    argv = apply_argv(tmp_path, root, marker)
    with no_unit_left(marker) as seen, supervising(argv) as first:
        unit_pid = int(marker.read_text())
        seen.add(unit_pid)
        second = subprocess.run(argv, capture_output=True, text=True, timeout=UP_TIMEOUT,
                                check=False)
        assert second.returncode == 1
        assert f"is already supervised by pid {first.pid}" in second.stderr, second.stderr
        assert int(marker.read_text()) == unit_pid, "the second started a unit"
        assert first.poll() is None
        first.send_signal(signal.SIGTERM)
        assert first.wait(UP_TIMEOUT) == 0


# -- what the run account can reach ------------------------------------------------------

# A delivered program the run account execs, as the launcher execs the resident.
PROBE = b"#!/bin/sh\necho reached\n"


def _probe_delivery(directory: Path, version: str) -> Path:
    out = directory / f"valis-serving-{version}.tar.gz"
    build_delivery(
        {"bin/unit": (GOOD_UNIT, 0o755), "bin/probe": (PROBE, 0o755),
         "lib/deep/more/probe": (PROBE, 0o755), "VERSION": version.encode()},
        version, out,
    )
    return out


def _as_run_account(*argv: str) -> subprocess.CompletedProcess[str]:
    account = ensure_system_user(RUN_USER)
    return subprocess.run(
        ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
         "--init-groups", "--", *argv],
        capture_output=True, text=True, timeout=UP_TIMEOUT, check=False, cwd="/",
    )


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def test_under_umask_077_the_run_account_still_reaches_and_execs_the_staged_programs(
    open_base: Path,
) -> None:
    require_root()
    ensure_system_user(RUN_USER)
    root = open_base / "opt" / "valis"
    command = [sys.executable, str(root / "current" / "bin" / "unit")]
    with _umask(0o077), ProcessUnitController(command, stop_timeout=5.0) as unit:
        applied = apply_delivery(
            _probe_delivery(open_base, "1.0.0"), root, unit, timeout=UP_TIMEOUT,
            reachable=reachable_by(RUN_USER),
        )
        assert applied.version == "1.0.0"
        assert unit.is_up()
    for directory in (open_base / "opt", root, root / "versions", root / "versions" / "1.0.0",
                      root / "versions" / "1.0.0" / "lib" / "deep"):
        assert directory.stat().st_mode & 0o777 == 0o755, directory
    assert (root / "current" / "VERSION").stat().st_mode & 0o777 == 0o644
    for program in ("bin/probe", "lib/deep/more/probe"):
        done = _as_run_account(str(root / "current" / program))
        assert (done.returncode, done.stdout) == (0, "reached\n"), done.stderr


def test_a_root_the_run_account_cannot_traverse_is_refused_before_the_switch(
    open_base: Path,
) -> None:
    require_root()
    ensure_system_user(RUN_USER)
    closed = open_base / "closed"
    closed.mkdir(mode=0o700)
    root = closed / "valis"
    command = [sys.executable, str(root / "current" / "bin" / "unit")]
    with ProcessUnitController(command, stop_timeout=5.0) as unit:
        with pytest.raises(DeliveryError) as refused:
            apply_delivery(
                _probe_delivery(open_base, "1.0.0"), root, unit, timeout=UP_TIMEOUT,
                reachable=reachable_by(RUN_USER),
            )
        assert unit.pid is None
    message = str(refused.value)
    assert f"{RUN_USER} cannot traverse {closed} (mode 0700" in message
    assert "nothing was switched" in message
    assert current_version(root) is None
    closed.chmod(0o711)
    assert _as_run_account("test", "-x", str(root / "versions" / "1.0.0" / "bin" / "probe")
                           ).returncode == 0


def test_the_cli_checks_the_default_run_account() -> None:
    require_root()
    ensure_system_user(RUN_USER)
    assert reachable_by(None) is not None
    with pytest.raises(DeliveryError, match="no account 'vl-nobody-here'"):
        reachable_by("vl-nobody-here")
