"""The push boot on real network namespaces, real BPF and a real firewall.

The first tests drive fulcrum's control socket in this process (the server fulcrum runs
beside the resident) against the real steer in a unit netns joined to a client netns,
and a pusher (``pusher.py``: the resident's own push code) started as the run account
inside the unit netns — or, to be refused, inside the client netns or as root. A client
in the client netns connects to the unit address's edge port and learns which socket it
reached from the tag that socket answers with.

The last tests launch whole units with ``fulcrum launch``: the real resident pushes and
serves DNS over HTTPS on the elected edge port, another port is dropped by the
firewall; and with a stand-in resident that pushes nothing the edge port is refused while
``designated-port`` still opens nothing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import dns.message
import pytest
import trio

from fulcrum import control
from fulcrum.control import ControlSocket, PushGate, open_control_socket, serve_control
from fulcrum.pushed import namespace_of_path
from fulcrum.steer import Steer
from tests.scenario import proving_ground
from tests.scenario.edge_ca import install, make_test_ca
from tests.scenario.genesis_host import (
    READY_TIMEOUT,
    ZONE,
    ZONE_FILE,
    provision_state_dir,
    resident_pid,
    workdir,  # noqa: F401  (the fixture, shared)
)
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import (
    PYTHON,
    UNIT_IP,
    Fulcrum,
    Ground,
    NotifyListener,
    dig,
    fulcrum_environment,
    run_in,
    tcp_exchange,
    unit_config_text,
)
from tests.scenario.resident_harness import (
    Harness,
    assert_failed_closed,
    make_state_dir,
    resident_runtime,
    site_facts,
)
from tests.scenario.standin_launch import (  # noqa: F401  (the fixtures, shared)
    accepted_ports,
    account,
    launch,
)
from tests.scenario.steer_netns import (
    EDGE,
    UNIT4,
    attached,
    netns_inode,
    pair,  # noqa: F401  (the fixture, shared)
    steer_links,
)
from tests.scenario.steer_object import steer_object_path
from valis_core.dns.zone.build import parse_zone_text
from valis_core.launch import parse_launch_argv
from valis_core.operator_state.zones import replace_zone
from valis_core.push_protocol import (
    DESCRIPTOR_LINE,
    Accepted,
    Refused,
    declare_line,
    reply_line,
)
from valis_core.resident.push import PUSH_TIMEOUT

PUSHER = Path(__file__).with_name("pusher.py")
PUSHER_LIFETIME = 120.0
LINE_TIMEOUT = 30.0
#: The restart loop: it stops once the new socket answered this often, or at the bounds.
NEW_SOCKET_ANSWERS = 50
LOOP_MAX_CONNECTIONS = 20000
LOOP_MAX_SECONDS = 60.0

# Runs in the client netns: connect in a loop, send a byte, read the tag that answers.
# Prints "new-seen" the first time NEW answers, then one JSON line of every outcome.
_TAG_LOOP = r"""
import json, socket, sys, time
host, port, new, want = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
limit, seconds = int(sys.argv[5]), float(sys.argv[6])
print("started", flush=True)
outcomes, seen, deadline = {}, 0, time.monotonic() + seconds
for _ in range(limit):
    try:
        with socket.create_connection((host, port), timeout=2) as conn:
            conn.sendall(b"?")
            key = conn.recv(64).decode() or "empty"
    except OSError as exc:
        key = type(exc).__name__
    outcomes[key] = outcomes.get(key, 0) + 1
    if key == new:
        seen += 1
        if seen == 1:
            print("new-seen", flush=True)
        if seen >= want:
            break
    if time.monotonic() > deadline:
        break
print(json.dumps(outcomes), flush=True)
"""


@pytest.fixture
def control_dir(account: tuple[int, int]) -> Iterator[Path]:  # noqa: F811
    """A directory the run account can reach: the pusher's copy and the control socket."""
    path = Path(tempfile.mkdtemp(prefix="vl-push-", dir="/tmp"))
    path.chmod(0o755)
    shutil.copyfile(PUSHER, path / PUSHER.name)
    (path / PUSHER.name).chmod(0o644)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.asynccontextmanager
async def control_server(
    directory: Path, uid: int, gid: int, unit: str, steer: Steer | None
) -> AsyncIterator[ControlSocket]:
    """fulcrum's control socket for ``unit``, served in this process for the block."""
    made = open_control_socket(str(directory / "control.sock"), {}, uid=uid, gid=gid)
    gate = PushGate(
        run_uid=uid,
        unit_netns=namespace_of_path(f"/run/netns/{unit}"),
        elected=frozenset({EDGE}),
        assign=None if steer is None else steer.assign,
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_control, made.sock, gate)
            yield made
            nursery.cancel_scope.cancel()
    finally:
        made.close()


@contextlib.asynccontextmanager
async def pusher(
    directory: Path, netns: str, tag: str, *, as_run_account: bool = True,
    ports: str = str(EDGE),
) -> AsyncIterator[str]:
    """The pusher in ``netns``; yields its verdict line; killed after the block."""
    python = str(Path(resident_runtime()).parent / "python")
    drop = ["setpriv", "--reuid", RUN_USER, "--regid", RUN_USER, "--init-groups"]
    argv = [
        "ip", "netns", "exec", netns, *(drop if as_run_account else []),
        python, "-I", str(directory / PUSHER.name), str(directory / "control.sock"), ports,
        tag, str(PUSHER_LIFETIME),
    ]  # fmt: skip
    process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        yield await read_line(process.stdout)
    finally:
        process.kill()
        with trio.move_on_after(LINE_TIMEOUT):
            await process.wait()


class Lines:
    """A stream read line by line, each line bounded in time. What came after a line in
    the same chunk is kept for the next: a process may write two lines before they are
    read."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._held = b""

    async def next(self) -> str:
        with trio.fail_after(LINE_TIMEOUT):
            while b"\n" not in self._held:
                chunk = await self._stream.receive_some(1024)
                if not chunk:
                    break
                self._held += chunk
        line, _, self._held = self._held.partition(b"\n")
        return line.decode().strip()


async def read_line(stream: trio.abc.ReceiveStream) -> str:
    """The first line from ``stream``, bounded in time."""
    return await Lines(stream).next()


async def reached(client: str, port: int = EDGE) -> dict[str, Any]:
    return await trio.to_thread.run_sync(
        lambda: tcp_exchange(client, UNIT4, port, "?", timeout=2.0)
    )


# -- the control socket and the steer --------------------------------------------------


async def test_a_push_from_the_run_account_in_the_unit_netns_is_steered_until_detached(
    pair: tuple[str, str], control_dir: Path, account: tuple[int, int]  # noqa: F811
) -> None:
    unit, client = pair
    uid, gid = account
    inode = netns_inode(f"/run/netns/{unit}")
    with attached(steer_object_path(), unit) as steer:
        async with control_server(control_dir, uid, gid, unit, steer) as made:
            info = os.stat(made.path)
            assert (info.st_uid, info.st_mode & 0o777) == (uid, 0o600)
            async with pusher(control_dir, unit, "A") as verdict:
                assert verdict.startswith("accepted 127.0.0.1 "), verdict
                assert int(verdict.split()[2]) >= 1024  # an ephemeral port, never privileged

                assert (await reached(client))["reply"] == "A"
                assert (await reached(client, EDGE + 1))["error"] == "ConnectionRefusedError"

                steer.close()  # detached: the pusher still listens, and 443 is refused
                assert steer_links(inode) == []
                assert (await reached(client))["error"] == "ConnectionRefusedError"


@pytest.mark.parametrize("where", ["another netns", "another uid"])
async def test_a_push_from_another_netns_or_another_uid_is_refused_and_nothing_steered(
    pair: tuple[str, str], control_dir: Path, account: tuple[int, int],  # noqa: F811
    where: str,
) -> None:
    unit, client = pair
    uid, gid = account
    with attached(steer_object_path(), unit) as steer:
        async with control_server(control_dir, uid, gid, unit, steer):
            if where == "another netns":
                refused = pusher(control_dir, client, "X")
                reason = "another network namespace than the unit's"
            else:
                refused = pusher(control_dir, unit, "X", as_run_account=False)
                reason = f"peer uid 0 is not the run account's (uid {uid})"
            async with refused as verdict:
                assert verdict.startswith("refused "), verdict
                assert reason in verdict
                assert (await reached(client))["error"] == "ConnectionRefusedError"


async def test_ports_the_launcher_did_not_elect_are_refused(
    pair: tuple[str, str], control_dir: Path, account: tuple[int, int]  # noqa: F811
) -> None:
    unit, _ = pair
    uid, gid = account
    with attached(steer_object_path(), unit) as steer:
        async with control_server(control_dir, uid, gid, unit, steer), pusher(
            control_dir, unit, "X", ports=f"{EDGE},8443"
        ) as verdict:
            assert "declared port(s) 8443 not elected" in verdict, verdict


async def test_a_restarted_resident_replaces_the_socket_in_place_and_nobody_is_refused(
    pair: tuple[str, str], control_dir: Path, account: tuple[int, int]  # noqa: F811
) -> None:
    unit, client = pair
    uid, gid = account
    with attached(steer_object_path(), unit) as steer:
        async with control_server(control_dir, uid, gid, unit, steer):
            old_pusher = pusher(control_dir, unit, "old")
            old_running = True
            old = await old_pusher.__aenter__()
            try:
                assert old.startswith("accepted"), old
                loop = await trio.lowlevel.open_process(
                    ["ip", "netns", "exec", client, PYTHON, "-I", "-c", _TAG_LOOP, UNIT4,
                     str(EDGE), "new", str(NEW_SOCKET_ANSWERS), str(LOOP_MAX_CONNECTIONS),
                     str(LOOP_MAX_SECONDS)],
                    stdout=subprocess.PIPE,
                )  # fmt: skip
                try:
                    assert loop.stdout is not None
                    lines = Lines(loop.stdout)
                    assert await lines.next() == "started"
                    async with pusher(control_dir, unit, "new") as new:
                        assert new.startswith("accepted"), new
                        assert await lines.next() == "new-seen"
                        # the new socket answers now: the old resident goes
                        old_running = False
                        await old_pusher.__aexit__(None, None, None)
                        outcome = json.loads(await lines.next())
                finally:
                    loop.kill()
                    with trio.move_on_after(LINE_TIMEOUT):
                        await loop.wait()
            finally:
                if old_running:
                    await old_pusher.__aexit__(None, None, None)
    # Every connection reached the old socket or the new one: none refused, none reset.
    assert set(outcome) == {"old", "new"}, outcome
    assert outcome["new"] >= NEW_SOCKET_ANSWERS


# -- a peer that stalls or lies ------------------------------------------------------------


@contextlib.asynccontextmanager
async def served_by_us(
    directory: Path, unit: str, steer: Steer | None = None
) -> AsyncIterator[str]:
    """The control socket with root (this test) as the run account: the peer checks past
    the uid are what is exercised."""
    async with control_server(directory, os.getuid(), os.getgid(), unit, steer) as made:
        yield made.path


async def exchange(path: str, *messages: tuple[bytes, list[int]]) -> str:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock:
        await sock.connect(path)
        for data, fds in messages:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _ints(fds))] if fds else []
            await sock.sendmsg([data], rights)
        reply = b""
        with trio.fail_after(control.EXCHANGE_TIMEOUT + LINE_TIMEOUT):
            while not reply.endswith(b"\n"):
                chunk = await sock.recv(512)
                if not chunk:
                    break
                reply += chunk
    return reply.decode()


def _ints(fds: list[int]) -> bytes:
    import array

    return array.array("i", fds).tobytes()


async def test_a_peer_that_stalls_is_refused_at_the_bound_never_hangs(
    pair: tuple[str, str], control_dir: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    unit, _ = pair
    monkeypatch.setattr(control, "EXCHANGE_TIMEOUT", 0.5)
    async with served_by_us(control_dir, unit) as path:
        declared_only = await exchange(path, (declare_line(frozenset({EDGE})), []))
        assert declared_only == "REFUSED no complete push within 0.5s\n"
        nothing = await exchange(path)
        assert nothing.startswith("REFUSED no complete push")


async def test_a_peer_that_lies_is_refused_with_a_reason(
    pair: tuple[str, str], control_dir: Path  # noqa: F811
) -> None:
    unit, _ = pair
    declare = declare_line(frozenset({EDGE}))
    with socket.socket() as a, socket.socket() as b, socket.socket(
        socket.AF_INET, socket.SOCK_DGRAM
    ) as udp, socket.socket() as unlistened, socket.socket() as host_listener:
        for sock in (a, b):
            sock.bind(("127.0.0.1", 0))
            sock.listen()
        host_listener.bind(("127.0.0.1", 0))
        host_listener.listen()
        cases: list[tuple[list[tuple[bytes, list[int]]], str]] = [
            ([(b"GET / HTTP/1.1\r\n", [])], "expected 'PUSH/1 PORTS"),
            ([(b"x" * 300, [])], "longer than"),
            ([(declare + DESCRIPTOR_LINE, [])], "without a descriptor"),
            ([(declare, []), (DESCRIPTOR_LINE, [a.fileno(), b.fileno()])], "2 descriptors"),
            ([(declare, [a.fileno()])], "descriptor"),
            ([(declare, []), (DESCRIPTOR_LINE, [udp.fileno()])], "not a TCP socket"),
            ([(declare, []), (DESCRIPTOR_LINE, [unlistened.fileno()])], "not listening"),
            ([(declare, []), (DESCRIPTOR_LINE, [host_listener.fileno()])],
             "another network namespace"),
        ]
        async with served_by_us(control_dir, unit) as path:
            for messages, reason in cases:
                reply = await exchange(path, *messages)
                assert reply.startswith("REFUSED "), (messages, reply)
                assert reason in reply, (messages, reply)


def test_the_reply_lines_are_the_protocols() -> None:
    assert reply_line(Accepted()) == b"ACCEPTED\n"
    assert reply_line(Refused("no\nnewline")) == b"REFUSED no?newline\n"


# -- whole units ---------------------------------------------------------------------------


def test_the_resident_pushes_and_the_elected_edge_port_reaches_it_through_the_firewall(
    ground: Ground, workdir: Path, pg_cluster: PgCluster, state_dsn: str  # noqa: F811
) -> None:
    run_account = ensure_system_user(RUN_USER)
    valis = resident_runtime()
    state_dir = provision_state_dir(workdir)
    ca = make_test_ca()
    cafile = workdir / "edge-root.pem"
    cafile.write_bytes(ca.root_pem)
    install(ca.issue((ZONE.rstrip("."),), (UNIT_IP,)), state_dir,
            (run_account.pw_uid, run_account.pw_gid))
    config = workdir / "launcher.toml"
    config.write_text(unit_config_text(
        ground, [valis], edge_port=EDGE, catchall_object_path=str(steer_object_path())
    ))
    config.chmod(0o644)
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(ZONE_FILE.read_text(), ZONE))
    notify_dir = workdir / "notify"
    notify_dir.mkdir()
    notify = NotifyListener(notify_dir)
    environment = fulcrum_environment(notify, state_dir, state_dsn, ZONE)
    control_path = Path(f"/run/fulcrum/{ground.unit_netns}.sock")
    fulcrum = Fulcrum.start(config, environment, workdir)
    try:
        try:
            notify.wait_for("READY", "1", READY_TIMEOUT)
        except TimeoutError:
            fulcrum.stop()
            raise AssertionError(f"no READY=1 from the unit:\n{fulcrum.stderr}") from None
        pid = resident_pid(fulcrum)
        inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        # By id: once the netns is gone its number is the next netns's, another test's.
        steering = {int(link["id"]) for link in steer_links(inode)}
        assert control_path.is_socket()

        # The edge port reaches the resident's socket: DNS over HTTPS answers there.
        query = base64.urlsafe_b64encode(
            dns.message.make_query(ZONE, "SOA").to_wire()).rstrip(b"=").decode()
        for version in ("--http2", "--http1.1"):
            got = run_in(ground.client, [
                "curl", "--silent", "--show-error", "--max-time", "10", version,
                "--cacert", str(cafile), "--output", "/dev/null", "--write-out",
                "%{http_code} %{content_type}",
                f"https://{UNIT_IP}:{EDGE}/dns-query?dns={query}",
            ])
            assert got.stdout == "200 application/dns-message", (version, got)
        # Another port is dropped by the firewall (no answer, not a refusal).
        assert tcp_exchange(ground.client, UNIT_IP, 8443, timeout=0.5)["error"] in (
            "TimeoutError", "timeout"
        )
        # DNS still on the inherited pair; the accept set is what the config elects.
        soa = dig(ground.client, UNIT_IP, ZONE, "SOA")
        assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
        _, ports, _ = accepted_ports(pid)
        assert ports == {("udp", 53), ("tcp", 53), ("tcp", EDGE)}

        fulcrum.signal(signal.SIGTERM)
        assert fulcrum.wait() == 0, fulcrum.stderr
    finally:
        if fulcrum.process.poll() is None:
            fulcrum.stop()
        notify.close()

    log = fulcrum.stderr
    steered = re.search(r"push: fulcrum steers port\(s\) 443 to 127\.0\.0\.1:(\d+)", log)
    assert steered is not None, log
    assert int(steered.group(1)) >= 1024
    assert re.search(r"control: push from pid \d+ accepted", log), log
    assert not control_path.exists()  # fulcrum made it, fulcrum removed it
    assert steering, "no steer link while the unit served its pushed edge"
    assert not steering & {int(link["id"]) for link in steer_links()}


def test_with_nothing_pushed_the_edge_port_is_refused_and_designated_port_opens_nothing(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch(designated_port=5353, edge_port=EDGE,
                  catchall_object_path=str(steer_object_path()))
    report = unit.report()
    _, ports, _ = accepted_ports(report["pid"])
    assert ports == {("udp", 53), ("tcp", 53), ("tcp", EDGE)}
    assert tcp_exchange(ground.client, UNIT_IP, EDGE)["error"] == "ConnectionRefusedError"
    assert tcp_exchange(ground.client, UNIT_IP, 5353, timeout=0.5)["error"] in (
        "TimeoutError", "timeout"
    )
    assert unit.fulcrum.stop() == 0


# -- socket activation -----------------------------------------------------------------------

# Stands in for systemd's socket activation in front of fulcrum: makes the control socket
# as the .socket unit would, puts it at descriptor 3 with LISTEN_FDS/LISTEN_PID/
# LISTEN_FDNAMES for this very process, and execs the real fulcrum (same pid).
_ACTIVATE = r"""#!/usr/bin/python3 -I
import os, socket, sys
path, mode = os.environ["ACTIVATE_PATH"], int(os.environ["ACTIVATE_MODE"], 8)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chown(path, int(os.environ["ACTIVATE_UID"]), int(os.environ["ACTIVATE_GID"]))
os.chmod(path, mode)
s.listen(8)
if s.fileno() == 3:
    os.set_inheritable(3, True)
else:
    os.dup2(s.fileno(), 3)
os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES="control")
os.execv(os.environ["ACTIVATE_FULCRUM"], [os.environ["ACTIVATE_FULCRUM"], *sys.argv[1:]])
"""


@pytest.fixture
def activated(control_dir: Path, account: tuple[int, int],  # noqa: F811
              monkeypatch: pytest.MonkeyPatch) -> Any:
    """``launch`` runs fulcrum behind a socket-activation stand-in; returns the env."""
    wrapper = control_dir / "activate"
    wrapper.write_text(_ACTIVATE)
    wrapper.chmod(0o755)
    monkeypatch.setattr(proving_ground, "FULCRUM", str(wrapper))

    def env(mode: str) -> dict[str, str]:
        return {
            "ACTIVATE_PATH": str(control_dir / "activated.sock"),
            "ACTIVATE_MODE": mode,
            "ACTIVATE_UID": str(account[0]),
            "ACTIVATE_GID": str(account[1]),
            "ACTIVATE_FULCRUM": proving_ground_fulcrum,
        }

    return env


proving_ground_fulcrum = proving_ground.FULCRUM


def test_a_socket_systemd_passes_is_the_control_socket_and_outlives_fulcrum(
    launch: Any, activated: Any, control_dir: Path  # noqa: F811
) -> None:
    unit = launch(env=activated("600"))
    record = parse_launch_argv(unit.report()["argv"])
    passed = control_dir / "activated.sock"
    assert record.control_socket == str(passed)
    assert "LISTEN_FDS" not in unit.report()["env"]
    assert unit.fulcrum.stop() == 0
    assert passed.is_socket()  # systemd's socket stays for the next start


def test_a_passed_socket_other_accounts_may_use_stops_bring_up(
    launch: Any, activated: Any  # noqa: F811
) -> None:
    unit = launch(env=activated("666"))
    assert unit.fulcrum.wait() == 1
    assert "it must be the run account's" in unit.fulcrum.stderr
    assert "mode 600" in unit.fulcrum.stderr


# -- the resident fails closed ---------------------------------------------------------------


def test_a_resident_that_cannot_reach_the_control_socket_fails_closed(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(
        make_state_dir(resident_harness.workdir), site_facts(zone_dsn), ports="{port},8443",
    )
    assert_failed_closed(
        resident, "push", "cannot push to fulcrum's control socket /run/fulcrum/none.sock"
    )


async def test_a_resident_refused_by_fulcrum_fails_closed_with_fulcrums_reason(
    resident_harness: Harness, zone_dsn: str, pair: tuple[str, str],  # noqa: F811
    control_dir: Path, account: tuple[int, int],  # noqa: F811
) -> None:
    unit, _ = pair
    async with control_server(control_dir, *account, unit, None) as made:
        resident = resident_harness.start(
            make_state_dir(resident_harness.workdir), site_facts(zone_dsn),
            ports="{port},8443", control_socket=made.path,
        )
        await trio.to_thread.run_sync(
            assert_failed_closed, resident, "push",
            "fulcrum refused the pushed socket: declared port(s) 8443 not elected",
        )


async def test_a_resident_whose_push_gets_no_answer_fails_closed_at_the_bound(
    resident_harness: Harness, zone_dsn: str, control_dir: Path,
    account: tuple[int, int],  # noqa: F811
) -> None:
    path = control_dir / "silent.sock"
    silent = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held: list[trio.socket.SocketType] = []
    with silent:
        await silent.bind(str(path))
        os.chown(path, *account)
        silent.listen(4)

        async def hold() -> None:  # accepts and never answers
            while True:
                conn, _ = await silent.accept()
                held.append(conn)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            resident = resident_harness.start(
                make_state_dir(resident_harness.workdir), site_facts(zone_dsn),
                ports="{port},8443", control_socket=str(path),
            )
            await trio.to_thread.run_sync(
                assert_failed_closed, resident, "push",
                f"did not answer the push within {PUSH_TIMEOUT:g}s",
            )
            nursery.cancel_scope.cancel()
    for conn in held:
        conn.close()
