"""Issue 25's acceptance: a node's life on two hosts under the real systemd, walked with
the operator's own commands.

Host A and host B are each a real systemd in private namespaces (``systemd_container``)
over this machine's root, with the session's delivery unpacked inside as cloud-init
would; the database host is a third namespace on the same proving ground
(``two_hosts.database_host``: a private TLS cluster at 198.51.100.5 admitting client
certificates of its CA only). Each host adopts two links on the ground's bridge: its
node's dedicated NIC, addressed and routed as a provider leaves it, and a management
link of its own address through which the host itself reaches the database host.

The story, in one test so it passes alone: README's first boot on A (``valis provision
--database-host ... --owner-port 8053``, the zone imported as the run account, ``valis
condense --genesis --systemd-unit``), a live update with ``nsupdate`` to A's owner port,
a backup on A carried to B, B provisioned with its own bundle and evacuated onto
(``valis condense --from-backup ... --evacuate``), A's unit stopped for good by the
fence (exit 77, no restart, ``valis status`` naming B), then the evacuation runbook of
docs/operator-verbs.md on both hosts — its commands read from that file — a backup on
B, and a restore on B into its state directory cleared as the docs say.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.conftest import require_root
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, EXAMPLE_ZONE, soa_zone
from tests.scenario.pg import RUN_USER
from tests.scenario.proving_ground import GATEWAY, PREFIX, Ground, dig, wait_for
from tests.scenario.proving_ground import sweep_stale as sweep_stale_grounds
from tests.scenario.systemd_container import Bind, SystemdContainer, sweep_stale
from tests.scenario.two_hosts import DATABASE_ADDRESS, DatabaseHost, database_host
from valis_core.fence import FENCED_OUT_EXIT_STATUS
from valis_core.operator_state.database_host import CA_CERT, CA_KEY, client_bundle

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operator-verbs.md"
UNIT = "fulcrum-valis.service"
SOCKET_UNIT = "fulcrum-valis-control.socket"
UNPACKED = "/root/valis-serving"
INSTALLED = "/opt/valis/current/bin/valis"
STATE_DIRECTORY = "/var/lib/valis-dns"
SITE_FACTS = "/etc/valis/site-facts.env"
ZONE_FILE = "/etc/valis/zones/example.test.zone"
BUNDLE = "/root/origin-1.pem"
NODE = "origin-1"
OWNER_PORT = 8053
DIST = "file:///srv/wheelhouse/simple/"
PROVISION_TIMEOUT = 300.0
CONDENSE_TIMEOUT = 240.0
STOP_TIMEOUT = 120.0
UPDATE_TIMEOUT = 60.0
LIVE_NAME = f"hello.{EXAMPLE_ZONE}"
LIVE_ADDRESS = "192.0.2.7"


@attrs.frozen
class Site:
    """Where a host stands on the ground: its location, its node's unit address, the
    address of its management link."""

    label: str
    location: str
    unit_ip: str
    management_ip: str


SITE_A = Site("a", "ams", "198.51.100.10", "198.51.100.31")
SITE_B = Site("b", "fra", "198.51.100.20", "198.51.100.32")


@attrs.frozen
class NodeHost:
    """One booted host: its container, its site, its dedicated NIC's name."""

    box: SystemdContainer
    site: Site
    nic: str

    def sh(self, command: str, *, timeout: float = 120.0) -> tuple[int, str, str]:
        done = self.box.run("sh", "-c", command, check=False, timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    def ok(self, command: str, *, timeout: float = 120.0) -> str:
        status, out, err = self.sh(command, timeout=timeout)
        assert status == 0, f"{command}: {out}{err}\n{self.box.journal(UNIT)[-4000:]}"
        return out

    def host_path(self, path: str) -> Path:
        """A path inside, as this machine reaches it (through the init's root)."""
        return Path(f"/proc/{self.box.init_pid}/root{path}")


def runbook_block(heading: str, *, index: int = 0) -> list[str]:
    """The commands of the ``index``-th ```sh block after ``heading`` in the docs."""
    text = DOCS.read_text()
    start = text.index(heading)
    blocks = re.findall(r"```sh\n(.*?)```", text[start:], re.DOTALL)
    joined = re.sub(r"\\\n\s*", "", blocks[index])
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def runbook_inline(heading: str, prefix: str) -> list[str]:
    """The inline `commands` starting with ``prefix`` in the section under ``heading``."""
    text = DOCS.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return [found for found in re.findall(r"`([^`\n]+)`", text[start:end])
            if found.startswith(prefix)]


def bundle_for(db: DatabaseHost, node: str, workdir: Path) -> Path:
    """What ``valis db client-bundle --node NODE`` writes on the database host: a client
    bundle of the database host's CA (laid out as ``valis db host`` keeps it)."""
    ca_dir = workdir / "operator-state-ca"
    ca_dir.mkdir(mode=0o700, exist_ok=True)
    (ca_dir / CA_CERT).write_bytes(db.ca.cert_pem)
    (ca_dir / CA_KEY).write_bytes(db.ca.key_pem)
    out = workdir / f"{node}.pem"
    out.write_bytes(client_bundle(ca_dir, RUN_USER, node, datetime.datetime.now(datetime.UTC)))
    return out


@contextlib.contextmanager
def node_host(ground: Ground, site: Site, delivery: Path, binds: list[Bind],
              bundle: Path) -> Iterator[NodeHost]:
    """A fresh host at ``site``: booted, both links adopted and addressed, the delivery
    unpacked, its bundle handed over; powered off afterwards, nothing of it left."""
    nic = ground.add_nic(site.label)
    management = ground.add_nic(f"{site.label}m")
    with SystemdContainer(binds=binds) as box:
        box.adopt_link(nic)
        box.adopt_link(management)
        host = NodeHost(box, site, nic)
        host.ok("userdel valis || true")
        host.ok(
            f"ip link set {management} up && "
            f"ip addr add {site.management_ip}/{PREFIX} dev {management} && "
            f"ip link set {nic} up && ip addr add {site.unit_ip}/{PREFIX} dev {nic} && "
            f"ip route add default via {GATEWAY} dev {nic}"
        )
        # The provider's gateway heard from on the NIC, as provision checks it is.
        # (No ping on this host: one datagram sent out of the NIC makes the ARP exchange.)
        host.ok(f"python3 -c \"import socket; s = socket.socket(socket.AF_INET, "
                f"socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET, "
                f"socket.SO_BINDTODEVICE, b'{nic}'); s.sendto(b'x', ('{GATEWAY}', 9))\"")
        box.wait_for(lambda: GATEWAY in host.ok(f"ip neigh show dev {nic}"), UPDATE_TIMEOUT,
                     f"{GATEWAY} in {nic}'s neighbour table")
        host.ok(f"mkdir -p {UNPACKED} && tar -xzf {delivery} -C {UNPACKED}")
        box.put(bundle, BUNDLE, mode=0o600)
        yield host
    assert box.leftovers() == []


def provision(host: NodeHost, delivery: Path) -> None:
    """README's first boot, its provision with the database host's bundle."""
    out = host.ok(
        f"{UNPACKED}/bin/valis provision --delivery {delivery} "
        f"--interface {host.nic} --node {NODE} --location {host.site.location} "
        f"--served-zone {EXAMPLE_ZONE} --owner-port {OWNER_PORT} "
        f"--database-host {DATABASE_ADDRESS} --database-bundle {BUNDLE} --dist {DIST}",
        timeout=PROVISION_TIMEOUT,
    )
    assert out.rstrip().endswith("host is ready"), out


def condense(host: NodeHost, *how: str) -> None:
    host.ok(
        f"{INSTALLED} condense {' '.join(how)} --site-facts {SITE_FACTS} "
        f"--systemd-unit {UNIT} --dns-address {host.site.unit_ip}:53 --ask-in-netns valis",
        timeout=CONDENSE_TIMEOUT,
    )


def answers(ground: Ground, address: str, name: str) -> list[str]:
    found = dig(ground.client, address, name, "A")
    assert (found.status, found.authoritative) == ("NOERROR", True), found.raw
    return sorted(record.split()[4] for record in found.answer)


def backup(host: NodeHost, out: str) -> str:
    """``valis backup create`` and ``verify`` on ``host``; the archive's path."""
    made = host.ok(f"{INSTALLED} backup create --out {out}")
    path = re.search(r"(/var/backups/\S+\.tar)", made)
    assert path is not None, made
    host.ok(f"{INSTALLED} backup verify {path.group(1)}")
    return path.group(1)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="valis-two-systemd-") as name:
        yield Path(name)


def test_a_node_boots_updates_evacuates_and_is_restored_by_the_operators_commands(
    delivery: Path, build_binds: tuple[Path, ...], workdir: Path
) -> None:
    require_root()
    sweep_stale()
    sweep_stale_grounds()
    binds = [Bind(path) for path in build_binds]
    if not any(delivery.is_relative_to(path) for path in build_binds):
        binds.append(Bind(delivery.parent))
    ground = Ground().build()
    try:
        with contextlib.ExitStack() as stack:
            db = stack.enter_context(database_host(ground))
            a = stack.enter_context(node_host(ground, SITE_A, delivery, binds,
                                              bundle_for(db, f"{NODE}-a", workdir)))
            b = stack.enter_context(node_host(ground, SITE_B, delivery, binds,
                                              bundle_for(db, f"{NODE}-b", workdir)))
            _story(ground, a, b, delivery, workdir)
    finally:
        ground.cleanup()


def _story(ground: Ground, a: NodeHost, b: NodeHost, delivery: Path, workdir: Path
           ) -> None:
    # -- A: README's first boot, over TLS to the database host -----------------------
    provision(a, delivery)
    a.box.put_text(ZONE_FILE, soa_zone(EXAMPLE_ZONE, extra=EXAMPLE_WWW), mode=0o644)
    a.ok(f"setpriv --reuid=valis --regid=valis --init-groups -- {INSTALLED} zone import "
         f"{ZONE_FILE}")
    condense(a, "--genesis")
    assert answers(ground, a.site.unit_ip, f"www.{EXAMPLE_ZONE}") == ["192.0.2.80"]

    # -- a live update to A's owner port, signed with the key valis owner key prints ----
    key_file = workdir / "owner.tsig"
    key_file.write_text(a.ok(f"{INSTALLED} owner key --state-dir {STATE_DIRECTORY}"))
    key_file.chmod(0o600)
    script = (f"server {a.site.unit_ip} {OWNER_PORT}\nzone {EXAMPLE_ZONE}\n"
              f"update delete {LIVE_NAME} A\nupdate add {LIVE_NAME} 300 A {LIVE_ADDRESS}\n"
              "send\n")
    updated = subprocess.run(
        ["ip", "netns", "exec", ground.client, "nsupdate", "-v", "-t", "10", "-k",
         str(key_file)], input=script, capture_output=True, text=True, timeout=60,
        check=False)
    assert updated.returncode == 0, updated.stderr + a.box.journal(UNIT)[-4000:]
    # The update is applied through the database and reloaded: poll (bounded) until A
    # answers it; before then the name may be NXDOMAIN.
    wait_for(lambda: [record.split()[4] for record in dig(
        ground.client, a.site.unit_ip, LIVE_NAME, "A").answer] == [LIVE_ADDRESS],
        UPDATE_TIMEOUT, "A to answer the live update")
    assert answers(ground, a.site.unit_ip, LIVE_NAME) == [LIVE_ADDRESS]

    # -- A's backup set, carried to B ---------------------------------------------------
    archive_a = backup(a, f"/var/backups/{NODE}-g{{generation}}.tar")
    assert archive_a.endswith("-g0.tar"), archive_a
    carried = workdir / Path(archive_a).name
    carried.write_bytes(a.host_path(archive_a).read_bytes())
    b.box.put(carried, archive_a, mode=0o600)

    # -- B: provisioned with its own bundle, evacuated onto from A's set ------------------
    provision(b, delivery)
    condense(b, "--from-backup", archive_a, "--evacuate")
    # The backup's client certificate replaced the one B was provisioned with.
    for name in ("ca.crt", "client.crt", "client.key"):
        tls = f"{STATE_DIRECTORY}/operator-state-tls/{name}"
        assert b.host_path(tls).read_bytes() == a.host_path(tls).read_bytes(), name
    assert answers(ground, b.site.unit_ip, LIVE_NAME) == [LIVE_ADDRESS]
    assert answers(ground, b.site.unit_ip, f"www.{EXAMPLE_ZONE}") == ["192.0.2.80"]

    # -- A stops by itself, for good: fenced out, exit 77, no restart ----------------------
    unit = a.box.wait_state(UNIT, ("failed", "inactive"), timeout=STOP_TIMEOUT, also=(
        "Result", "NRestarts", "ExecMainStatus"))
    journal = a.box.journal(UNIT)
    assert unit["ActiveState"] == "failed", (unit, journal[-4000:])
    assert unit["NRestarts"] == "0", journal[-4000:]
    assert unit["ExecMainStatus"] == str(FENCED_OUT_EXIT_STATUS), unit
    status = a.box.run(INSTALLED, "status", "--state-dir", STATE_DIRECTORY, check=False)
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stderr.startswith(
        f"valis: fenced out by {NODE}@{b.site.location}#"), status.stderr
    assert " at generation 1: " in status.stderr, status.stderr
    with pytest.raises(RuntimeError, match="no DNS response"):
        dig(ground.client, a.site.unit_ip, EXAMPLE_ZONE, timeout=1.0)

    # -- the runbook, on B: at once a backup, verified ------------------------------------
    (create,) = runbook_inline("### Evacuation runbook", "valis backup create")
    (verify,) = runbook_inline("### Evacuation runbook", "valis backup verify")
    b.ok(_installed(create))
    b.ok(_installed(verify))
    archive_b = create.split("--out", 1)[1].split()[0]

    # -- the runbook, on A: both units disabled, the state directory destroyed ------------
    for command in runbook_block("### Evacuation runbook"):
        a.ok(_installed(command) if command.startswith("valis ") else command)
    for unit_name in (UNIT, SOCKET_UNIT):
        # Not enabled (the link provision made is removed with it), not running.
        enabled = a.box.systemctl("is-enabled", unit_name, check=False)
        assert enabled.returncode != 0, enabled.stdout + enabled.stderr
        assert a.box.show(unit_name, "ActiveState")["ActiveState"] == "inactive"
    assert a.sh(f"ip -4 addr show dev {a.nic} | grep -c inet")[1].strip() == "0"
    (destroy,) = runbook_inline("### Evacuation runbook", "shred -u")
    a.ok(destroy)
    assert a.sh(f"test -e {STATE_DIRECTORY}")[0] != 0

    # -- a restore on B, by the docs' commands: unit stopped, state directory cleared ----
    *clear, restore = runbook_block("**Restoring the node on the host that holds the fence**")
    assert clear[0].split("#")[0].strip() == "valis stop", clear
    for command in clear:
        b.ok(_installed(command) if command.startswith("valis ") else command)
    assert b.ok(f"ls -A {STATE_DIRECTORY}").strip() == ""
    assert restore.startswith(f"valis condense --from-backup {archive_b} "), restore
    assert f"--dns-address {b.site.unit_ip}:53" in restore, restore
    b.ok(_installed(restore), timeout=CONDENSE_TIMEOUT)
    assert b.box.show(UNIT, "ActiveState")["ActiveState"] == "active"
    assert answers(ground, b.site.unit_ip, LIVE_NAME) == [LIVE_ADDRESS]
    b.ok(f"ip netns exec valis {INSTALLED} status --state-dir {STATE_DIRECTORY}")
    # ... and backed up again at once: the fence stands at the restore's claim.
    assert backup(b, f"/var/backups/{NODE}-g{{generation}}.tar").endswith("-g2.tar")


def _installed(command: str) -> str:
    """A documented ``valis ...`` command run by the installed binary (``valis`` is not on
    the test host's PATH)."""
    assert command.startswith("valis "), command
    return f"{INSTALLED} {command[len('valis '):]}"
