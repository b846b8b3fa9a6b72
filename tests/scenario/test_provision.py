"""First boot as an operator walks it: fetch the delivery, unpack it, ``valis provision``,
``valis condense --genesis``, and the node answers; provision again changes nothing.

The host is a real systemd in private namespaces (``systemd_container``), booted over a
copy-on-write of this machine's root with the run account removed, so it starts as a
fresh Debian host with PostgreSQL installed but stopped and nothing of valis on it. The
proving ground's NIC is its public interface, addressed and routed as a provider would
leave it; the client namespace asks the unit's address from outside. The delivery is
the session's ``make dist`` tarball (``frozen_build``), unpacked inside as cloud-init
would; everything after that is the delivery's own ``valis``.

The host's life is built by module-scoped fixtures, one stage on the next, never by the
test before: ``host`` (fresh), ``provisioned`` (``valis provision`` under umask 077),
``condensed`` (the zone imported and ``condense --genesis`` run) and ``serving`` (the
condensed node with its unit running, started again if a test stopped it). Each test asks
for the stage it looks at, so it passes alone and in any ``-k`` subset; the stages only
move forward, so a test of an earlier stage (the plan on a fresh host) comes before the
later ones in the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.conftest import require_root
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, EXAMPLE_ZONE, soa_zone
from tests.scenario.proving_ground import GATEWAY, PREFIX, UNIT_IP, Ground, dig
from tests.scenario.proving_ground import sweep_stale as sweep_stale_grounds
from tests.scenario.systemd_container import Bind, SystemdContainer, sweep_stale

UNIT = "fulcrum-valis.service"
SOCKET_UNIT = "fulcrum-valis-control.socket"
CONTROL_SOCKET = "/run/fulcrum/valis.sock"
UNPACKED = "/root/valis-serving"
INSTALLED = "/opt/valis/current/bin/valis"
ZONE_FILE = "/var/tmp/example.test.zone"
PROVISION_TIMEOUT = 300.0
CONDENSE_TIMEOUT = 240.0
HBA_LINE = "local  valis_state  valis  peer  map=valis"
DIST = "file:///srv/wheelhouse/simple/"
STEP = re.compile(r"^  \[(done|to do|blocked)\s*\] (\S+)", re.MULTILINE)


@attrs.frozen
class Host:
    """The fresh host, its public network, and the delivery it was handed."""

    box: SystemdContainer
    ground: Ground
    delivery: Path

    def sh(self, command: str, *, timeout: float = 120.0) -> tuple[int, str, str]:
        done = self.box.run("sh", "-c", command, check=False, timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    def provision(self, valis: str, *extra: str, umask: str = "022") -> tuple[int, str, str]:
        """``valis provision`` as root, as the cloud-init example runs it."""
        argv = [valis, "provision", "--delivery", str(self.delivery), "--node", "node-a",
                "--location", "lab", "--served-zone", EXAMPLE_ZONE,
                "--interface", self.ground.nic, "--dist", DIST, *extra]
        return self.sh(f"umask {umask}; exec " + " ".join(argv), timeout=PROVISION_TIMEOUT)

    def as_run_account(self, command: str, *, timeout: float = 120.0) -> tuple[int, str, str]:
        return self.sh(f"setpriv --reuid=valis --regid=valis --init-groups -- {command}",
                       timeout=timeout)

    def inode(self, path: str) -> str:
        return self.box.run("stat", "-c", "%i %U %a", path).stdout.strip()

    def handed_control_socket(self) -> tuple[str, str, str]:
        """What fulcrum was handed as its control socket: the ``LISTEN_FDNAMES`` in its
        environment, the socket its first passed descriptor (fd 3) is, and the socket
        listening at the control socket's path (``ss``), both as ``socket:[inode]``."""
        main = self.box.show(UNIT, "MainPID")["MainPID"]
        environ = self.box.run("cat", f"/proc/{main}/environ").stdout.split("\0")
        names = next((item for item in environ if item.startswith("LISTEN_FDNAMES=")), "")
        passed = self.box.run("readlink", f"/proc/{main}/fd/3").stdout.strip()
        listed = self.box.run("ss", "-xlnH", "src", CONTROL_SOCKET).stdout.split()
        return names, passed, f"socket:[{listed[5]}]" if len(listed) > 5 else str(listed)


def steps(output: str) -> dict[str, str]:
    return {name: status for status, name in STEP.findall(output)}


@attrs.frozen
class Done:
    """What one command said: its exit status, output and error output."""

    status: int
    out: str
    err: str


@pytest.fixture(scope="module")
def host(delivery: Path, build_binds: tuple[Path, ...]) -> Iterator[Host]:
    require_root()
    sweep_stale()
    sweep_stale_grounds()
    ground = Ground().build()
    try:
        binds = [Bind(path) for path in build_binds]
        if not any(delivery.is_relative_to(path) for path in build_binds):
            binds.append(Bind(delivery.parent))
        with SystemdContainer(binds=binds) as box:
            box.adopt_link(ground.nic)
            node = Host(box, ground, delivery)
            # A provider's host: no valis account, the public interface addressed, its
            # gateway heard from; the delivery fetched and unpacked (cloud-init's part).
            node.sh("userdel valis || true")
            nic = ground.nic
            status, out, err = node.sh(
                f"ip link set {nic} up && ip addr add {UNIT_IP}/{PREFIX} dev {nic} && "
                f"ip route add default via {GATEWAY} && "
                f"ping -c 1 -W 5 {GATEWAY} >/dev/null 2>&1 || "
                f"python3 -c \"import socket; socket.socket(socket.AF_INET, "
                f"socket.SOCK_DGRAM).sendto(b'x', ('{GATEWAY}', 9))\"; sleep 1; "
                f"ip neigh show dev {nic}"
            )
            assert status == 0, out + err
            status, out, err = node.sh(
                f"mkdir -p {UNPACKED} && tar -xzf {delivery} -C {UNPACKED}"
            )
            assert status == 0, err
            box.put_text(ZONE_FILE, soa_zone(EXAMPLE_ZONE, extra=EXAMPLE_WWW), mode=0o644)
            yield node
        assert box.leftovers() == []
    finally:
        ground.cleanup()


@pytest.fixture(scope="module")
def provisioned(host: Host) -> Done:
    """The fresh host provisioned by the unpacked delivery's ``valis`` under umask 077:
    what ``valis provision`` said."""
    return Done(*host.provision(f"{UNPACKED}/bin/valis", umask="077"))


@pytest.fixture(scope="module")
def condensed(host: Host, provisioned: Done) -> Done:
    """The provisioned host with the zone imported and ``valis condense --genesis`` run:
    what the condense said."""
    assert provisioned.status == 0, provisioned.out + provisioned.err
    status, out, err = host.as_run_account(f"{INSTALLED} zone import {ZONE_FILE}")
    assert status == 0, out + err
    return Done(*host.sh(
        f"{INSTALLED} condense --genesis --site-facts /etc/valis/site-facts.env "
        f"--systemd-unit {UNIT} --dns-address {UNIT_IP}:53 --ask-in-netns valis",
        timeout=CONDENSE_TIMEOUT,
    ))


@pytest.fixture
def serving(host: Host, condensed: Done) -> Host:
    """The condensed node with its unit running (started again if a test stopped it)."""
    assert condensed.status == 0, condensed.out + condensed.err + host.box.journal(UNIT)
    if host.box.show(UNIT, "ActiveState")["ActiveState"] != "active":
        host.box.systemctl("start", UNIT, timeout=CONDENSE_TIMEOUT)
    return host


def test_the_plan_is_shown_first_and_plan_alone_changes_nothing(host: Host) -> None:
    status, out, err = host.provision(f"{UNPACKED}/bin/valis", "--plan")
    assert status == 0, out + err
    shown = steps(out)
    assert list(shown) == [
        "run-account", "fhs-layout", "delivery", "state-directory", "database-client",
        "postgresql-cluster",
        "postgresql-role", "postgresql-database", "peer-ident", "peer-hba", "schema",
        "launcher-config", "site-facts", "private-dist", "unit",
    ]
    assert shown["run-account"] == "to do"
    assert shown["private-dist"] == "to do"
    assert host.sh("id valis")[0] != 0
    assert host.sh("test -e /opt/valis")[0] != 0


def test_the_plan_takes_the_role_database_and_no_unit_and_refuses_a_libpq_password(
    host: Host
) -> None:
    valis = f"{UNPACKED}/bin/valis"
    status, out, err = host.provision(valis, "--plan", "--role", "dns_ops", "--database",
                                      "dns_state", "--no-unit")
    assert status == 0, out + err
    assert "CREATE ROLE dns_ops LOGIN" in out
    assert "CREATE DATABASE dns_state OWNER dns_ops" in out
    assert "local  dns_state  dns_ops  peer  map=valis" in out
    assert steps(out)["unit"] == "done"
    assert ("start the node by hand: valis condense --unit-command "
            "'/opt/valis/current/bin/fulcrum launch --config /etc/fulcrum/launcher.toml'"
            ) in out
    status, out, err = host.provision(valis, "--plan", "--role", "DNS-ops")
    assert status == 1
    assert "provision: --role 'DNS-ops' is not a plain lower-case PostgreSQL identifier" \
        in err
    status, out, err = host.sh(f"PGPASSWORD=secret {valis} provision --plan --node n "
                               "--location l --served-zone example.test. --interface lo")
    assert status == 1
    assert "provision: DSN refused: the environment sets PGPASSWORD" in err
    assert "secret" not in err
    assert host.sh("id valis")[0] != 0
    assert host.sh("test -e /opt/valis")[0] != 0


def test_a_fresh_host_is_provisioned_by_the_unpacked_delivery_under_umask_077(
    host: Host, provisioned: Done,
) -> None:
    status, out, err = provisioned.status, provisioned.out, provisioned.err
    assert status == 0, out + err
    shown = steps(out)
    # Operator state on this host's own PostgreSQL: no database host, no client bundle.
    assert shown.pop("database-client") == "done"
    for name in shown:
        assert f"  done: {name}:" in out
    assert out.rstrip().endswith("host is ready"), out

    # The run account: a system account without a login shell.
    entry = host.sh("getent passwd valis")[1].split(":")
    assert int(entry[2]) < 1000
    assert entry[6].strip() == "/usr/sbin/nologin"
    # The layout apply uses, world-traversable whatever the umask.
    assert host.inode("/opt/valis").endswith("root 755")
    assert host.inode("/opt/valis/versions").endswith("root 755")
    assert host.sh("readlink /opt/valis/current")[1].strip().startswith("versions/")
    assert host.inode("/var/lib/valis-dns").endswith("valis 700")
    # PostgreSQL: exactly the run account, by peer over the socket; no password.
    hba = host.sh("cat /etc/postgresql/*/main/pg_hba.conf")[1].splitlines()
    assert hba.count(HBA_LINE) == 1
    first_local_all = next(i for i, line in enumerate(hba) if line.split()[:3] == [
        "local", "all", "all"])
    assert hba.index(HBA_LINE) < first_local_all
    assert host.sh("stat -c '%U:%G %a' /etc/valis/site-facts.env")[1].strip() == (
        "root:valis 640")
    facts = host.sh("cat /etc/valis/site-facts.env")[1]
    assert "postgresql://valis@/valis_state?host=/var/run/postgresql" in facts
    assert "password" not in facts
    status, out, err = host.as_run_account(f"{INSTALLED} zone list --dsn "
                                           "'postgresql://valis@/valis_state?host=/var/run/postgresql'")
    assert status == 0, out + err  # the schema is migrated and the account gets in
    assert DIST in host.sh("cat /etc/valis/dist/registration.json")[1]
    # The unit and its control socket are placed and enabled, neither started.
    for unit in (UNIT, SOCKET_UNIT):
        assert host.box.systemctl("is-enabled", unit).stdout.strip() == "enabled"
        assert host.box.show(unit, "ActiveState")["ActiveState"] == "inactive"
        assert host.sh(f"readlink /etc/systemd/system/{unit}")[1].strip() == (
            f"/opt/valis/current/lib/systemd/system/{unit}")
    assert host.sh(f"test -e {CONTROL_SOCKET}")[0] != 0
    assert host.inode("/etc/fulcrum/launcher.toml").endswith("root 644")


def test_condense_from_genesis_and_the_node_answers_from_a_client_namespace(
    host: Host, condensed: Done,
) -> None:
    assert condensed.status == 0, condensed.out + condensed.err + host.box.journal(UNIT)
    for tcp in (False, True):
        soa = dig(host.ground.client, UNIT_IP, EXAMPLE_ZONE, "SOA", tcp=tcp)
        assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
    www = dig(host.ground.client, UNIT_IP, f"www.{EXAMPLE_ZONE}", "A")
    assert [record.split()[4] for record in www.answer] == ["192.0.2.80"], www.raw


def test_fulcrum_is_handed_the_run_accounts_control_socket_which_outlives_its_restart(
    serving: Host,
) -> None:
    host = serving
    assert host.sh(f"stat -c '%F %U:%G %a' {CONTROL_SOCKET}")[1].strip() == (
        "socket valis:valis 600")
    names, passed, listening = host.handed_control_socket()
    assert names == "LISTEN_FDNAMES=control"
    assert passed == listening
    kept = host.inode(CONTROL_SOCKET)

    host.box.systemctl("restart", UNIT, timeout=CONDENSE_TIMEOUT)

    assert host.box.show(UNIT, "ActiveState")["ActiveState"] == "active"
    assert host.inode(CONTROL_SOCKET) == kept  # systemd kept it; fulcrum made none
    assert host.handed_control_socket() == (names, passed, listening)
    soa = dig(host.ground.client, UNIT_IP, EXAMPLE_ZONE, "SOA")
    assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw


def test_provision_again_changes_nothing_and_leaves_the_node_serving(serving: Host) -> None:
    host = serving
    kept = ["/etc/fulcrum/launcher.toml", "/etc/valis/site-facts.env",
            "/etc/postgresql/15/main/pg_hba.conf", "/etc/postgresql/15/main/pg_ident.conf"]
    before = [host.inode(path) for path in kept]
    main_pid = host.box.show(UNIT, "MainPID")["MainPID"]
    # The dedicated NIC now lives in the unit's namespace: the config written for it
    # keeps its network.
    assert host.sh(f"ip link show {host.ground.nic}")[0] != 0

    status, out, err = host.provision(INSTALLED)

    assert status == 0, out + err
    assert set(steps(out).values()) == {"done"}
    assert "nothing to change" in out
    assert [host.inode(path) for path in kept] == before
    assert host.box.show(UNIT, "MainPID")["MainPID"] == main_pid
    soa = dig(host.ground.client, UNIT_IP, EXAMPLE_ZONE, "SOA")
    assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw


def test_after_the_unit_stops_its_bare_interface_keeps_the_written_network(
    serving: Host,
) -> None:
    host = serving
    before = host.inode("/etc/fulcrum/launcher.toml")
    host.box.systemctl("stop", UNIT)
    # fulcrum hands the dedicated NIC back without its address.
    assert host.sh(f"ip -4 addr show dev {host.ground.nic} | grep -c inet")[1].strip() == "0"

    status, out, err = host.provision(INSTALLED, "--plan")

    assert status == 0, out + err
    assert set(steps(out).values()) == {"done"}
    assert "carries no address" in out
    assert host.inode("/etc/fulcrum/launcher.toml") == before


def test_postgresql_that_is_not_local_stops_with_what_the_dba_must_do(
    host: Host, condensed: Done,
) -> None:
    assert condensed.status == 0, condensed.out + condensed.err
    status, out, err = host.provision(INSTALLED, "--pg-port", "5499")
    assert status == 1
    assert err.count("\n") == 1
    assert "blocked at postgresql-cluster" in err
    assert "CREATE ROLE valis LOGIN;" in out
    assert "CREATE DATABASE valis_state OWNER valis;" in out
    assert HBA_LINE in out
    assert "nothing was changed" in err


def test_a_named_account_whose_home_is_not_traversable_is_named_with_the_directory(
    host: Host, condensed: Done,
) -> None:
    # The last stage: it makes alice the unit's account, which no test after it expects.
    assert condensed.status == 0, condensed.out + condensed.err
    status, _, err = host.sh(
        "mkdir -p /srv/closed && chmod 0700 /srv/closed && "
        "useradd --system --home-dir /srv/closed/alice --create-home alice"
    )
    assert status == 0, err
    status, out, err = host.provision(INSTALLED, "--run-account", "alice", "--plan")
    assert status == 1
    assert steps(out)["run-account"] == "blocked"
    assert "cannot traverse /srv/closed" in out
    # Made traversable, the account is accepted: fulcrum pins its ids, and a drop-in
    # runs the unit as it (the shipped unit names valis).
    host.sh("chmod o+x /srv/closed")
    status, out, err = host.provision(INSTALLED, "--run-account", "alice", "--plan")
    assert status == 0, out + err
    shown = steps(out)
    assert shown["run-account"] == "done"
    assert shown["unit"] == "to do"
    assert "drop-ins make alice the service's user and the socket's owner" in out

    # Carried out, systemd reads both drop-ins: the service runs as alice and the
    # control socket is made alice's (fulcrum refuses one its run account does not own).
    status, out, err = host.provision(INSTALLED, "--run-account", "alice")
    assert "  done: unit:" in out, out + err
    group = host.sh("id -gn alice")[1].strip()
    assert host.box.show(UNIT, "User", "Group") == {"User": "alice", "Group": group}
    assert host.box.show(SOCKET_UNIT, "SocketUser", "SocketGroup") == {
        "SocketUser": "alice", "SocketGroup": group}
