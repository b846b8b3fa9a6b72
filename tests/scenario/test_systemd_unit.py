"""The shipped unit under a real systemd, running the delivery ``make dist`` builds.

One container (``systemd_container``) is this module's host: the host's own systemd as
PID 1 over a copy-on-write of its root, with the proving ground's NIC moved into its
network namespace, so the client namespace asks the unit's address from outside as it
would a real host. The host's days are built by fixtures, one stage on the next, never by
the test before: ``node`` (placed, nothing applied), ``applied`` (the delivery applied),
``newer_applied`` (then a newer one), ``broken_applied`` (then one whose resident fails),
all module-scoped, and per test ``serving`` (the unit running, started again if a test
stopped it) or ``stopped``. Each test asks for the stage it looks at, so it passes alone
and in any ``-k`` subset; the stages only move forward, so the tests of a stage come
before those of the next in the file.

The host is placed as ``valis provision`` would leave it: the run account, the launcher
config at ``/etc/fulcrum/launcher.toml`` (root, 0644), the site facts at
``/etc/valis/site-facts.env`` and the unit and its control socket unit linked from
where ``valis apply`` puts the delivered ones (``systemctl link`` of
``/opt/valis/current/lib/systemd/system/...``, made before anything is staged). The
operator-state database is the session's private cluster on the test host: its socket
directory is bind-mounted into the container at the same path, so the site facts' DSN
is the same inside and out (the container's own ``/tmp`` is a fresh tmpfs). The delivery
and the ``valis`` that applies it are the session's frozen build (``frozen_build``),
bound in read-only at their host paths.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.conftest import require_root
from tests.scenario.frozen_build import VERSION, PlainBuild, delivery_of
from tests.scenario.operator_state_helpers import EXAMPLE_ZONE
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import UNIT_IP, Ground, dig, unit_config_text
from tests.scenario.proving_ground import sweep_stale as sweep_stale_grounds
from tests.scenario.systemd_container import Bind, SystemdContainer, sweep_stale
from tests.scenario.systemd_node import (
    DELIVERED,
    LAUNCHER_CONFIG,
    ROOT,
    SERVING,
    SITE_FACTS,
    SOCKET_UNIT,
    STATE_DIRECTORY,
    UNIT,
    UP_TIMEOUT,
    Node,
    example_operator_state,
)
from tests.unit_files import FULCRUM_UNIT
from valis_core.operator_state.site_facts import parse_site_facts, render_site_facts
from valis_core.state_layout import CONFIG_FILE, CONFIG_STORE

CONTROL_SOCKET = "/run/fulcrum/valis.sock"
NEWER = f"{VERSION}+systemd.2"
BROKEN = f"{VERSION}+systemd.plain"
HANDED = f"{VERSION}+systemd.3"
BROKEN_HANDED = f"{VERSION}+systemd.plain.3"
NEWER_DESCRIPTION = f"valis {NEWER} (fulcrum-launched resident)"
MISSING_CONFIG = "fulcrum: launcher config: "
ABSENT_ZONE = "absent.test."
UNCHANGED = "reload: the store is unchanged"
#: The site facts' VALIS_DNS_WORKERS: fulcrum binds this many UDP sockets on :53.
DNS_WORKERS = 2


@pytest.fixture(scope="module")
def node(pg_cluster: PgCluster, bundle: Path, delivery: Path, plain_build: PlainBuild,
         *, build_root: Path, build_binds: tuple[Path, ...]) -> Iterator[Node]:
    require_root()
    ensure_system_user(RUN_USER)
    sweep_stale()
    sweep_stale_grounds()
    dsn = example_operator_state(pg_cluster)
    staged = build_root / "systemd-unit"
    # The newer version's unit differs (its description): apply must load it.
    unit_text = FULCRUM_UNIT.read_text()
    described = re.sub(r"(?m)^Description=.*$", f"Description={NEWER_DESCRIPTION}", unit_text)
    newer = delivery_of(bundle, NEWER, staged / "newer.tar.gz",
                        {f"lib/systemd/system/{UNIT}": described.encode()})
    broken = delivery_of(plain_build.bundle, BROKEN, staged / "plain.tar.gz")
    ground = Ground().build()
    try:
        binds = [*map(Bind, build_binds), Bind(pg_cluster.cluster.socket_dir)]
        with SystemdContainer(binds=binds) as box:
            box.adopt_link(ground.nic)
            config = unit_config_text(ground, [f"{ROOT}/current/bin/valis"])
            box.put_text(LAUNCHER_CONFIG, config, mode=0o644)
            facts = {"VALIS_NODE_NAME": "node-a", "VALIS_LOCATION": "systemd-container",
                     "VALIS_OPERATOR_STATE_DSN": dsn, "VALIS_SERVED_ZONES": EXAMPLE_ZONE,
                     "VALIS_DNS_WORKERS": str(DNS_WORKERS)}
            box.put_text(SITE_FACTS, render_site_facts(facts), mode=0o644)
            # What `systemctl link` makes; it refuses a file not yet staged.
            for unit in (UNIT, SOCKET_UNIT):
                box.run("ln", "-s", f"{DELIVERED}/{unit}", f"/etc/systemd/system/{unit}")
            box.systemctl("daemon-reload")
            yield Node(box, ground, str(bundle / "valis"), delivery, newer, broken)
        assert box.leftovers() == []
    finally:
        ground.cleanup()


@attrs.frozen
class Applied:
    """What one ``valis apply`` said, and the unit's main pid and the control socket's
    inode just before it."""

    status: int
    out: str
    err: str
    main_before: str
    control_socket_before: str


def _apply(node: Node, delivery: Path) -> Applied:
    main = node.unit("MainPID")["MainPID"]
    socket = node.box.run("stat", "-c", "%i", CONTROL_SOCKET, check=False).stdout
    return Applied(*node.apply(delivery, "--timeout", str(UP_TIMEOUT)), main, socket)


@pytest.fixture(scope="module")
def applied(node: Node) -> Applied:
    """The placed host with the session's delivery applied (the first version)."""
    return _apply(node, node.delivery)


@pytest.fixture(scope="module")
def newer_applied(node: Node, applied: Applied) -> Applied:
    """Then the newer delivery applied over it."""
    assert applied.status == 0, applied.err + node.box.journal(UNIT)
    return _apply(node, node.newer)


@pytest.fixture(scope="module")
def broken_applied(node: Node, newer_applied: Applied) -> Applied:
    """Then the delivery whose resident fails applied over the newer one."""
    assert newer_applied.status == 0, newer_applied.err + node.box.journal(UNIT)
    return _apply(node, node.broken)


@pytest.fixture(scope="module")
def handed_over(node: Node, broken_applied: Applied, bundle: Path, plain_build: PlainBuild,
                *, build_root: Path) -> tuple[AppliedAsking, Path]:
    """Then a delivery changing nothing fulcrum runs by (only a document) applied under
    queries from the client: handed over to; and the build without the serving codec
    alike, for the next stage."""
    assert node.unit("ActiveState")["ActiveState"] == "active", node.box.journal(UNIT)
    staged = build_root / "systemd-unit"
    unit_text = node.box.read_text(f"{ROOT}/versions/{NEWER}/lib/systemd/system/{UNIT}")
    same = {f"lib/systemd/system/{UNIT}": unit_text.encode(),
            "share/doc/valis/fulcrum.md": b"# handed over\n"}
    handed = delivery_of(bundle, HANDED, staged / "handed.tar.gz", same)
    broken = delivery_of(plain_build.bundle, BROKEN_HANDED, staged / "plain-handed.tar.gz",
                         same)
    return _apply_asking(node, handed), broken


@pytest.fixture(scope="module")
def broken_handed_over(node: Node, handed_over: tuple[AppliedAsking, Path]) -> AppliedAsking:
    """Then the build without the serving codec, changing nothing fulcrum runs by either,
    applied under queries: its resident does not come up."""
    asked, broken = handed_over
    assert asked.applied.status == 0, asked.applied.err + node.box.journal(UNIT)
    return _apply_asking(node, broken)


@attrs.frozen
class AppliedAsking:
    """An apply made while the client asked the zone throughout, and what failed."""

    applied: Applied
    resident_before: int
    failures: tuple[str, ...]


def _apply_asking(node: Node, delivery: Path) -> AppliedAsking:
    resident = node.resident()
    with _Asking(node) as asking:
        applied = _apply(node, delivery)
    return AppliedAsking(applied, resident, tuple(asking.failures))


@pytest.fixture
def serving(node: Node, applied: Applied) -> Node:
    """The applied node with its unit running (started again if a test stopped it)."""
    assert applied.status == 0, applied.err + node.box.journal(UNIT)
    if node.unit("ActiveState")["ActiveState"] != "active":
        node.box.systemctl("reset-failed", UNIT, check=False)
        node.box.systemctl("start", UNIT, timeout=UP_TIMEOUT)
    node.box.wait_state(UNIT, "active", timeout=UP_TIMEOUT)
    return node


@pytest.fixture
def stopped(node: Node, applied: Applied) -> Node:
    """The applied node with its unit stopped."""
    assert applied.status == 0, applied.err + node.box.journal(UNIT)
    node.box.systemctl("stop", UNIT, timeout=UP_TIMEOUT)
    return node


def test_apply_starts_the_unit_and_the_residents_ready_reaches_systemd(
    node: Node, applied: Applied,
) -> None:
    status, out, err = applied.status, applied.out, applied.err
    assert status == 0, err + node.box.journal(UNIT)
    assert out == (f"valis: {VERSION}: no version serves yet: the unit is started\n"
                   f"valis: {VERSION} is serving (previous: none)\n")
    assert node.box.run("readlink", f"{ROOT}/current").stdout.strip() == f"versions/{VERSION}"
    unit = node.unit("ActiveState", "SubState", "StatusText", "Type")
    assert (unit["ActiveState"], unit["SubState"], unit["Type"]) == ("active", "running",
                                                                     "notify")
    # READY came from the resident, across ip netns exec -> setpriv: systemd shows its text.
    assert SERVING.search(unit["StatusText"]), unit
    assert node.generation() == 0
    node.assert_answers()


def test_fulcrum_is_handed_the_control_socket_systemd_made_for_the_run_account(
    serving: Node,
) -> None:
    node = serving
    assert node.box.run("stat", "-c", "%F %U:%G %a", CONTROL_SOCKET).stdout.strip() == (
        f"socket {RUN_USER}:{RUN_USER} 600")
    assert node.box.show(SOCKET_UNIT, "ActiveState")["ActiveState"] == "active"
    main = node.unit("MainPID")["MainPID"]
    environ = node.box.run("cat", f"/proc/{main}/environ").stdout.split("\0")
    assert "LISTEN_FDNAMES=control" in environ
    # The resident is told systemd's path, not the one fulcrum would make for its netns.
    argv = node.box.run("cat", f"/proc/{node.resident()}/cmdline").stdout.split("\0")
    assert argv[argv.index("--control-socket") + 1] == CONTROL_SOCKET


def _owner_and_mode(box: SystemdContainer, path: str) -> str:
    return box.run("stat", "-c", "%U:%G %a", path).stdout.strip()


def test_the_state_directory_is_the_run_accounts_and_the_config_directories_roots(
    serving: Node,
) -> None:
    node = serving
    assert _owner_and_mode(node.box, STATE_DIRECTORY) == f"{RUN_USER}:{RUN_USER} 700"
    key = _owner_and_mode(node.box, f"{STATE_DIRECTORY}/owner.key")
    assert key == f"{RUN_USER}:{RUN_USER} 600"
    assert _owner_and_mode(node.box, "/etc/fulcrum") == "root:root 755"
    assert _owner_and_mode(node.box, "/etc/valis") == "root:root 755"
    # fulcrum runs as root (ExecStart=+), the resident as the run account.
    main = node.unit("MainPID")["MainPID"]
    assert node.box.run("stat", "-c", "%U", f"/proc/{main}").stdout.strip() == "root"
    resident = node.resident()
    assert node.box.run("stat", "-c", "%U", f"/proc/{resident}").stdout.strip() == RUN_USER


def test_the_node_serves_dns_on_two_workers_each_answering(serving: Node) -> None:
    """VALIS_DNS_WORKERS=2: fulcrum hands two UDP sockets of one SO_REUSEPORT group to
    the resident, and queries from many source ports (each dig its own) reach both."""
    node = serving
    answered_before = _worker_answers(node)
    assert len(answered_before) == DNS_WORKERS
    asks = 24  # the chance that 24 source ports all hash to one of two sockets: 2^-23
    for _ in range(asks):
        soa = dig(node.ground.client, UNIT_IP, EXAMPLE_ZONE, "SOA", timeout=5.0)
        assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
    answered = _worker_answers(node)
    grew = [after - before for before, after in zip(answered_before, answered, strict=True)]
    assert all(more > 0 for more in grew), (answered_before, answered)
    assert sum(grew) >= asks
    shown = node.box.run("ip", "netns", "exec", node.ground.unit_netns,
                         f"{ROOT}/current/bin/valis", "status", "--state-dir", STATE_DIRECTORY,
                         check=False).stdout
    assert "worker 1: answered" in shown, shown
    assert f"(2 workers) tcp={UNIT_IP}:53" in node.box.journal(UNIT)


def _worker_answers(node: Node) -> list[int]:
    """Each DNS worker's answered count, as ``valis status --json`` reads it (from the
    unit's netns, where the fabric listens)."""
    shown = node.box.run("ip", "netns", "exec", node.ground.unit_netns,
                         f"{ROOT}/current/bin/valis", "status", "--json", "--state-dir",
                         STATE_DIRECTORY, check=False)
    assert shown.stdout.startswith("{"), (shown.returncode, shown.stdout, shown.stderr)
    document = json.loads(shown.stdout)
    return [row["answered"] for row in document["dns"]["workers"]]


def _held(node: Node, resident: int) -> dict[str, str]:
    """What ``resident`` holds that fulcrum made: its netns and each handed-down socket
    (by the launch record's flags; ``--dns-udp-fds``, the DNS workers' UDP sockets, as
    one comma-joined entry), as the kernel names them (``net:[N]``, ``socket:[N]``)."""
    argv = node.box.run("cat", f"/proc/{resident}/cmdline").stdout.split("\0")
    held = {"netns": node.box.run("readlink", f"/proc/{resident}/ns/net").stdout.strip()}
    for flag in ("--dns-udp-fd", "--dns-udp-fds", "--dns-tcp-fd", "--owner-fd"):
        if flag in argv:
            fds = argv[argv.index(flag) + 1].split(",")
            held[flag] = ",".join(
                node.box.run("readlink", f"/proc/{resident}/fd/{fd}").stdout.strip()
                for fd in fds
            )
    return held


def test_a_killed_resident_is_taken_over_by_fulcrum_on_the_same_netns_and_sockets(
    serving: Node,
) -> None:
    """kill -9 of the resident: fulcrum starts the next one itself, on the netns and the
    sockets it kept; systemd sees no restart, and the node answers again."""
    node = serving
    key, generation = node.owner_key_digest(), node.generation()
    before = node.unit("NRestarts", "MainPID")
    resident = node.resident()
    held = _held(node, resident)
    udp = held["--dns-udp-fds"].split(",")
    assert len(udp) == DNS_WORKERS, held
    assert all(sock.startswith("socket:[") for sock in udp), held
    assert held["--dns-tcp-fd"].startswith("socket:["), held
    node.box.run("kill", "-KILL", str(resident))

    def taken_over() -> int | None:
        children = node.box.run(
            "sh", "-c", f"cat /proc/{before['MainPID']}/task/*/children", check=False,
        ).stdout.split()
        fresh = [int(pid) for pid in children if int(pid) != resident]
        ready = SERVING.search(node.unit("StatusText")["StatusText"])
        return fresh[0] if len(fresh) == 1 and ready else None

    successor = node.box.wait_for(taken_over, UP_TIMEOUT, "fulcrum to start a new resident")
    assert node.unit("NRestarts", "MainPID", "ActiveState") == {**before, "ActiveState": "active"}
    assert _held(node, successor) == held
    journal = node.box.journal(UNIT)
    assert "resident was killed by SIGKILL without being asked to stop; starting it again " \
           "on the same sockets" in journal, journal
    assert node.owner_key_digest() == key
    assert node.generation() == generation
    node.assert_answers()


class _Asking:
    """Asks the zone from the client over and over (UDP and TCP in turn) on a thread of
    its own until stopped: every failure is kept (bounded in count and time)."""

    LIMIT = 5000

    def __init__(self, node: Node) -> None:
        self.node, self.asked = node, 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ask, daemon=True)

    def _ask(self) -> None:
        while not self._stop.is_set() and self.asked < self.LIMIT:
            tcp = self.asked % 2 == 1
            self.asked += 1
            try:
                soa = dig(self.node.ground.client, UNIT_IP, EXAMPLE_ZONE, "SOA", tcp=tcp,
                          timeout=5.0)
            except RuntimeError as exc:
                self.failures.append(str(exc))
            else:
                if (soa.status, soa.authoritative) != ("NOERROR", True):
                    self.failures.append(soa.raw)

    def __enter__(self) -> _Asking:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_reload_hands_over_to_a_new_resident_on_the_same_sockets_answering_throughout(
    serving: Node,
) -> None:
    """systemctl reload: a new resident beside the old one on fulcrum's sockets, READY
    before the old one drains, no query unanswered; systemd sees no restart."""
    node = serving
    generation = node.generation()
    before = node.unit("NRestarts", "MainPID")
    old = node.resident()
    held = _held(node, old)
    with _Asking(node) as asking:
        node.box.systemctl("reload", UNIT, timeout=UP_TIMEOUT)
        new = node.resident()
        while asking.asked < 10:  # a few more after it, too (bounded: dig's own timeout)
            time.sleep(0.05)
    assert asking.failures == [], asking.failures
    assert new != old
    assert node.unit("NRestarts", "MainPID", "ActiveState") == {**before, "ActiveState": "active"}
    assert _held(node, new) == held
    argv = node.box.run("cat", f"/proc/{new}/cmdline").stdout.split("\0")
    assert "--successor" in argv
    journal = node.box.journal(UNIT)
    assert f"handed over: pid {new} serves and writes; pid {old} exited" in journal, journal
    assert "write turn granted by fulcrum" in journal, journal
    assert node.generation() == generation
    node.assert_answers()


def test_a_reload_whose_new_resident_fails_leaves_the_old_one_serving_and_says_why(
    serving: Node,
) -> None:
    node = serving
    store = f"{STATE_DIRECTORY}/{CONFIG_STORE}/{CONFIG_FILE}"
    kept = node.box.read_text(store)
    asked = {**parse_site_facts(kept), "VALIS_SERVED_ZONES": f"{EXAMPLE_ZONE},{ABSENT_ZONE}"}
    old = node.resident()
    node.box.put_text(store, render_site_facts(asked), mode=0o600, owner=RUN_USER)
    try:
        with _Asking(node) as asking:
            reload = node.box.systemctl("reload", UNIT, check=False, timeout=UP_TIMEOUT)
    finally:
        node.box.put_text(store, kept, mode=0o600, owner=RUN_USER)
    assert reload.returncode != 0
    assert asking.failures == [], asking.failures
    assert node.resident() == old
    assert node.unit("ActiveState")["ActiveState"] == "active"
    journal = node.box.journal(UNIT)
    failed = [line for line in journal.splitlines() if "handover failed: the new resident" in line]
    assert failed, journal
    assert f"pid {old} goes on serving, unchanged" in failed[-1], failed
    assert ABSENT_ZONE in failed[-1], failed
    node.assert_answers()


def test_apply_of_a_newer_delivery_restarts_the_unit_on_it(
    node: Node, newer_applied: Applied,
) -> None:
    before = newer_applied.main_before
    control_socket = newer_applied.control_socket_before
    status, out, err = newer_applied.status, newer_applied.out, newer_applied.err
    assert status == 0, err + node.box.journal(UNIT)
    assert out == (f"valis: {NEWER}: it changes lib/systemd/system/{UNIT}, which fulcrum runs "
                   "by: the unit is restarted\n"
                   f"valis: {NEWER} is serving (previous: {VERSION})\n")
    # systemd runs the newer version's unit file, not the one it loaded before.
    assert node.unit("Description", "NeedDaemonReload") == {
        "Description": NEWER_DESCRIPTION, "NeedDaemonReload": "no"}
    main = node.unit("MainPID")["MainPID"]
    assert main != before
    exe = node.box.run("readlink", f"/proc/{main}/exe").stdout.strip()
    assert exe == f"{ROOT}/versions/{NEWER}/bin/fulcrum"
    resident = node.box.run("readlink", f"/proc/{node.resident()}/exe").stdout.strip()
    assert resident == f"{ROOT}/versions/{NEWER}/bin/valis"
    # The restarted fulcrum was handed the control socket systemd kept.
    assert node.box.run("stat", "-c", "%i", CONTROL_SOCKET).stdout == control_socket
    node.assert_answers()


def test_apply_of_a_delivery_whose_resident_fails_switches_back(
    node: Node, broken_applied: Applied,
) -> None:
    status, err = broken_applied.status, broken_applied.err
    assert status == 1, err
    assert f"version {BROKEN} did not come up" in err
    assert f"switched back to {NEWER}, which came up again" in err
    assert node.box.run("readlink", f"{ROOT}/current").stdout.strip() == f"versions/{NEWER}"
    assert node.unit("ActiveState")["ActiveState"] == "active"
    assert "serving codec not available" in node.box.journal(UNIT)
    main = node.unit("MainPID")["MainPID"]
    exe = node.box.run("readlink", f"/proc/{main}/exe").stdout.strip()
    assert exe == f"{ROOT}/versions/{NEWER}/bin/fulcrum"
    node.assert_answers()


def test_the_residents_warnings_and_errors_reach_the_journal_at_their_priority(
    serving: Node,
) -> None:
    """An in-place reload (SIGHUP to fulcrum by hand) asking for a zone operator state
    does not hold is refused: that error is in ``journalctl -p warning``, the resident's
    routine lines are not (they are info)."""
    node = serving
    store = f"{STATE_DIRECTORY}/{CONFIG_STORE}/{CONFIG_FILE}"
    kept = node.box.read_text(store)
    facts = parse_site_facts(kept)
    asked = {**facts, "VALIS_SERVED_ZONES": f"{EXAMPLE_ZONE},{ABSENT_ZONE}"}
    node.box.put_text(store, render_site_facts(asked), mode=0o600, owner=RUN_USER)
    try:
        _sighup(node)

        def refused() -> str | None:
            urgent = node.box.journal(UNIT, priority="warning")
            return urgent if "reload: served zones" in urgent else None

        urgent = node.box.wait_for(refused, UP_TIMEOUT, "the refused reload in the journal")
        assert ABSENT_ZONE in urgent, urgent
        assert "valis resident: error: reload: served zones" in urgent, urgent
        assert "valis resident: info:" not in urgent, urgent
        assert "adopting DNS descriptor pair" in node.box.journal(UNIT)  # info is kept too
        node.assert_answers()
    finally:
        unchanged = node.box.journal(UNIT).count(UNCHANGED)
        node.box.put_text(store, kept, mode=0o600, owner=RUN_USER)
        _sighup(node)
        node.box.wait_for(lambda: node.box.journal(UNIT).count(UNCHANGED) > unchanged,
                          UP_TIMEOUT, "the reload of the kept store")


def _sighup(node: Node) -> None:
    """SIGHUP to fulcrum by hand: passed to the resident, its in-place reload."""
    node.box.systemctl("kill", "--kill-who=main", "--signal=HUP", UNIT)


def test_systemctl_stop_tears_the_netns_down_and_leaves_no_process(serving: Node) -> None:
    node = serving
    control_group = node.unit("ControlGroup")["ControlGroup"]
    assert node.ground.unit_netns in node.box.run("ip", "netns", "list").stdout
    node.box.systemctl("stop", UNIT)
    assert node.unit("ActiveState", "SubState") == {"ActiveState": "inactive",
                                                    "SubState": "dead"}
    assert node.ground.unit_netns not in node.box.run("ip", "netns", "list").stdout
    assert node.box.run("pgrep", "-u", RUN_USER, check=False).stdout == ""
    left = node.box.run("cat", f"/sys/fs/cgroup{control_group}/cgroup.procs", check=False)
    assert left.stdout.strip() == ""
    # The NIC is back in the host's namespace, not lost with the unit's.
    assert node.box.run("ip", "link", "show", "dev", node.ground.nic, check=False).returncode == 0


def test_valis_stop_stops_the_service_and_its_socket_so_nothing_starts_it_again(
    serving: Node
) -> None:
    node = serving
    assert node.unit("ActiveState")["ActiveState"] == "active"
    assert node.box.show(SOCKET_UNIT, "ActiveState")["ActiveState"] == "active"
    done = node.box.run(f"{ROOT}/current/bin/valis", "stop", check=False, timeout=UP_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stopped {UNIT} and its control socket {SOCKET_UNIT}" in done.stdout
    for unit in (UNIT, SOCKET_UNIT):
        assert node.box.show(unit, "ActiveState")["ActiveState"] == "inactive", unit
    assert node.ground.unit_netns not in node.box.run("ip", "netns", "list").stdout
    # The run account, the one account the socket let in, finds nothing to connect to,
    # and the service stays down.
    knock = node.box.run("setpriv", f"--reuid={RUN_USER}", f"--regid={RUN_USER}",
                         "--init-groups", "--", "python3", "-c",
                         "import socket; socket.socket(socket.AF_UNIX)"
                         f".connect({CONTROL_SOCKET!r})", check=False)
    assert knock.returncode != 0
    assert node.unit("ActiveState")["ActiveState"] == "inactive"
    # Started again as the output says: the service brings its socket up first.
    node.box.systemctl("start", UNIT, timeout=UP_TIMEOUT)
    node.box.wait_state(UNIT, "active", timeout=UP_TIMEOUT)
    assert node.box.show(SOCKET_UNIT, "ActiveState")["ActiveState"] == "active"


def test_without_a_launcher_config_systemd_tries_five_times_then_refuses(stopped: Node) -> None:
    node = stopped
    box = node.box
    config = box.read_text(LAUNCHER_CONFIG)
    box.run("rm", LAUNCHER_CONFIG)
    box.systemctl("reset-failed", UNIT, check=False)  # a stopped unit may be unloaded
    # RestartSec=5 would make this 25 s of waiting: a drop-in shortens it to a tenth of
    # a second. StartLimitBurst and StartLimitIntervalSec stay the shipped unit's.
    box.put_text(f"/etc/systemd/system/{UNIT}.d/restart-soon.conf",
                 "[Service]\nRestartSec=100ms\n")
    box.systemctl("daemon-reload")
    try:
        limits = box.show(UNIT, "StartLimitBurst", "RestartUSec")
        assert limits == {"StartLimitBurst": "5", "RestartUSec": "100ms"}, limits
        first = box.systemctl("start", UNIT, check=False)
        assert first.returncode != 0
        box.wait_state(UNIT, "failed", timeout=UP_TIMEOUT)
        journal = box.journal(UNIT)
        reasons = _fulcrum_reasons(journal)
        assert len(reasons) == 5, journal
        assert "Start request repeated too quickly" in journal, journal
        assert len(set(reasons)) == 1, reasons
        assert f"no file at {LAUNCHER_CONFIG}" in reasons[0], reasons

        refused = box.systemctl("start", UNIT, check=False)
        assert refused.returncode != 0
        assert box.show(UNIT, "ActiveState")["ActiveState"] == "failed"
        assert len(_fulcrum_reasons(box.journal(UNIT))) == 5, "no sixth attempt"

        box.systemctl("reset-failed", UNIT)
        box.put_text(LAUNCHER_CONFIG, config, mode=0o644)
        box.systemctl("start", UNIT, timeout=UP_TIMEOUT)
        assert box.show(UNIT, "ActiveState")["ActiveState"] == "active"
        node.assert_answers()
    finally:
        box.put_text(LAUNCHER_CONFIG, config, mode=0o644)
        box.run("rm", "-r", f"/etc/systemd/system/{UNIT}.d")
        box.systemctl("daemon-reload")


def test_systemd_would_hand_a_configuration_directory_it_creates_to_the_run_account(
    node: Node,
) -> None:
    """Why the unit declares no ConfigurationDirectory= (systemd 252, Debian 12): one it
    creates is the User='s, so /etc/fulcrum would be the run account's to rewrite."""
    probe = "valis-configuration-probe"
    node.box.run("systemd-run", "--wait", "--quiet", f"--property=User={RUN_USER}",
                 f"--property=ConfigurationDirectory={probe}", "/bin/true")
    assert _owner_and_mode(node.box, f"/etc/{probe}") == f"{RUN_USER}:{RUN_USER} 755"


def _fulcrum_reasons(journal: str) -> list[str]:
    """fulcrum's one-line refusals of its launcher config in the unit's journal."""
    return [line for line in journal.splitlines() if line.startswith(MISSING_CONFIG)]


def test_the_unit_is_linked_where_apply_puts_the_delivered_one(
    node: Node, newer_applied: Applied,
) -> None:
    assert newer_applied.status == 0, newer_applied.err
    fragment = node.unit("FragmentPath")["FragmentPath"]
    assert fragment == f"/etc/systemd/system/{UNIT}"
    target = node.box.run("readlink", "-f", fragment).stdout.strip()
    assert target == f"{ROOT}/versions/{NEWER}/lib/systemd/system/{UNIT}"
    socket_fragment = node.box.show(SOCKET_UNIT, "FragmentPath")["FragmentPath"]
    assert node.box.run("readlink", socket_fragment).stdout.strip() == (
        f"{DELIVERED}/{SOCKET_UNIT}")
    assert shlex.split(node.unit("ExecStart")["ExecStart"].split("argv[]=")[1])[0] == (
        f"{ROOT}/current/bin/fulcrum"
    )


def test_apply_of_a_delivery_changing_only_the_resident_hands_over_answering_throughout(
    node: Node, handed_over: tuple[AppliedAsking, Path],
) -> None:
    asked = handed_over[0]
    applied = asked.applied
    assert applied.status == 0, applied.err + node.box.journal(UNIT)
    assert applied.out.splitlines() == [
        f"valis: {HANDED}: fulcrum, its steer and its units are unchanged: the new resident "
        "is handed over to (systemctl reload), without a restart",
        f"valis: {HANDED} is serving (previous: {NEWER})",
    ]
    assert asked.failures == (), asked.failures
    # The same fulcrum, a new resident running the new version.
    assert node.unit("MainPID")["MainPID"] == applied.main_before
    resident = node.resident()
    assert resident != asked.resident_before
    exe = node.box.run("readlink", f"/proc/{resident}/exe").stdout.strip()
    assert exe == f"{ROOT}/versions/{HANDED}/bin/valis"
    node.assert_answers()


def test_apply_of_a_failing_delivery_that_would_hand_over_leaves_the_old_one_serving(
    node: Node, broken_handed_over: AppliedAsking,
) -> None:
    asked = broken_handed_over
    applied = asked.applied
    assert applied.status == 1, applied.err
    assert f"version {BROKEN_HANDED} did not come up" in applied.err, applied.err
    assert "serving codec not available" in applied.err, applied.err
    assert f"switched back to {HANDED}, which kept serving throughout" in applied.err
    assert asked.failures == (), asked.failures
    assert node.box.run("readlink", f"{ROOT}/current").stdout.strip() == f"versions/{HANDED}"
    assert node.unit("MainPID")["MainPID"] == applied.main_before
    assert node.resident() == asked.resident_before
    node.assert_answers()
