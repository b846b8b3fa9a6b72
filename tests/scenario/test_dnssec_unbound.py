"""A zone signed online, proven by a validating resolver: the operator turns signing on
(``valis zone sign``), gives the parent's DS (``valis zone ds``) to a real Unbound as its
trust anchor, and Unbound, resolving through the node from its own namespace, finds every
kind of answer secure (AD=1): data, names that do not exist, NODATA, wildcards, CNAME
and DNAME chains, a secure delegation to a child signed with the other algorithm and the
proof an insecure one has no DS; a record changed in PostgreSQL is served signed at once; a
signature altered on the wire is refused; ``delv`` says fully validated. A zone signed with
the NSEC3 option (``valis zone sign --denial nsec3``) validates the same way, NXDOMAIN
included, and its AXFR carries it fully signed: ``ldns-verify-zone`` accepts the transfer,
while a zone denying compactly is refused to its secondary."""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.zone
import pytest

from tests.conftest import require_root
from tests.scenario.nsd_conf import nsd_server
from tests.scenario.operator_state_helpers import import_zone, run_sql
from tests.scenario.pg import RUN_USER, PgCluster, runtime_bin, valis
from tests.scenario.proving_ground import run, run_in, wait_for
from tests.scenario.resident_harness import REPO, Resident, harness, site_facts
from tests.scenario.transfer_wire import stop_server
from valis_core.dns.dnssec import key_tag
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.secondaries import Secondary, add_secondary

NODE_IP = "192.0.2.1"
RESOLVER_IP = "192.0.2.2"
NODE_PORT = 5300
"""The node's DNS port: the harness binds it as the run account, so above 1024."""
PARENT = "example.test."
SECURE = "secure.example.test."
INSECURE = "insecure.example.test."
TAMPERED = "tampered.test."
"""A signed zone Unbound reaches only through a proxy that flips a bit of every RRSIG."""
PROXY_PORT = 5301
ROLLED = "rolled.test."
"""A signed zone whose key is rolled, its trust anchor in a file rewritten as its parent's
DS set would change."""
SPLIT = "split.test."
"""A zone signed with a KSK and a ZSK (algorithm 15) whose keys are rolled, each alone; its
trust anchor (the KSK's DS) in a file like ``ROLLED``'s. Its data lives a second in
caches, so what Unbound validates at each step is what the zone serves then."""
SPLIT_EXTRA = 'www 1 IN A 198.51.100.81\n*.wild 1 IN TXT "split"\n'
CHAINED = "chained.test."
"""A zone signed with an NSEC3 chain, transferred signed to a secondary."""
CHAINED_EXTRA = (
    "www IN A 192.0.2.80\n"
    "*.wild IN TXT \"wild\"\n"
    "deep.ent IN A 192.0.2.9\n"
    f"insecure IN NS ns.insecure\nns.insecure IN A {NODE_IP}\n"
    f"secure IN NS ns.secure\nns.secure IN A {NODE_IP}\n"
    "secure IN DS 12345 13 2 " + "ab" * 32 + "\n"
)
BOUND = 30.0
PARENT_EXTRA = (
    "www IN A 192.0.2.80\n"
    "www IN AAAA 2001:db8::80\n"
    "alias IN CNAME www\n"
    "*.wild IN TXT \"wild\"\n"
    f"d IN DNAME wild.{PARENT}\n"
    f"secure IN NS ns.secure\nns.secure IN A {NODE_IP}\n"
    f"insecure IN NS ns.insecure\nns.insecure IN A {NODE_IP}\n"
)
CHILD_EXTRA = "www IN A 198.51.100.80\n"

# Runs in the node's namespace with this checkout's interpreter: relays UDP queries to the
# node and flips the last bit of every RRSIG's signature in the answer section (bounded:
# at most 10 000 queries, each waiting at most two seconds for the node).
_TAMPER = r"""
import socket, sys
import dns.message, dns.rdatatype
host, port, upstream = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
front.bind((host, port))
back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
back.settimeout(2)
for _ in range(10000):
    query, peer = front.recvfrom(65535)
    back.sendto(query, (host, upstream))
    try:
        data = back.recv(65535)
    except TimeoutError:
        continue
    message = dns.message.from_wire(data)
    for rrset in message.answer:
        if rrset.rdtype == dns.rdatatype.RRSIG:
            for rdata in list(rrset):
                flipped = rdata.signature[:-1] + bytes([rdata.signature[-1] ^ 1])
                rrset.remove(rdata)
                rrset.add(rdata.replace(signature=flipped))
    front.sendto(message.to_wire(), peer)
"""


@attrs.define
class Wire:
    """Two namespaces joined by a veth pair: the node and the validating resolver."""

    tag: str = attrs.field(factory=lambda: secrets.token_hex(3))

    @property
    def node(self) -> str:
        return f"vl-sn-{self.tag}"

    @property
    def resolver(self) -> str:
        return f"vl-sr-{self.tag}"

    def build(self) -> None:
        near, far = f"vsn-{self.tag}", f"vsr-{self.tag}"
        for netns in (self.node, self.resolver):
            run(["ip", "netns", "add", netns])
            run(["ip", "-n", netns, "link", "set", "lo", "up"])
        run(["ip", "link", "add", near, "type", "veth", "peer", "name", far])
        run(["ip", "link", "set", near, "netns", self.node])
        run(["ip", "link", "set", far, "netns", self.resolver])
        run(["ip", "-n", self.node, "addr", "add", f"{NODE_IP}/24", "dev", near])
        run(["ip", "-n", self.resolver, "addr", "add", f"{RESOLVER_IP}/24", "dev", far])
        run(["ip", "-n", self.node, "link", "set", near, "up"])
        run(["ip", "-n", self.resolver, "link", "set", far, "up"])

    def cleanup(self) -> None:
        for netns in (self.node, self.resolver):
            for pid in run(["ip", "netns", "pids", netns], check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            run(["ip", "netns", "del", netns], check=False)


@attrs.frozen
class Resolved:
    status: str
    flags: frozenset[str]
    answer: tuple[str, ...]
    raw: str


@attrs.frozen
class Signed:
    """The proving ground: the node, the resolver, the database and the trust anchor."""

    wire: Wire
    node: Resident
    pg: PgCluster
    dsn: str
    anchor: str
    child_ds: str
    workdir: Path
    state: Path
    unbound: list[subprocess.Popen[bytes]] = attrs.field(factory=list)
    chained_anchor: str = ""
    """The NSEC3 zone's DS, as its parent would hold it."""

    def resolve(self, name: str, rdtype: str = "A", *flags: str) -> Resolved:
        """One question to Unbound, from its namespace (one try, bounded)."""
        out = run_in(self.wire.resolver, [
            "dig", f"@{RESOLVER_IP}", name, rdtype, "+dnssec", "+time=5", "+tries=1",
            "+noall", "+comments", "+answer", *flags,
        ], check=False, timeout=15).stdout
        header = re.search(r"->>HEADER<<- opcode: \w+, status: (\w+)", out)
        shown = re.search(r";; flags: ([a-z ]*);", out)
        assert header is not None, out
        assert shown is not None, out
        answer = tuple(line for line in out.splitlines() if line.strip() and line[0] != ";")
        return Resolved(header.group(1), frozenset(shown.group(1).split()), answer, out)

    def at_node(self, name: str, rdtype: str) -> str:
        return run_in(self.wire.resolver, [
            "dig", f"@{NODE_IP}", "-p", str(NODE_PORT), name, rdtype, "+dnssec",
            "+norecurse", "+time=2", "+tries=1",
        ], check=False, timeout=10).stdout


def valis_ok(*argv: str) -> str:
    status, out, err = valis(*argv)
    assert status == 0, err
    return out


def unbound_conf(directory: Path, anchor: str, tampered: str, chained: str) -> str:
    return f"""server:
    interface: {RESOLVER_IP}
    port: 53
    access-control: 192.0.2.0/24 allow
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{directory}"
    pidfile: ""
    use-syslog: no
    logfile: "{directory}/unbound.log"
    verbosity: 1
    val-log-level: 2
    num-threads: 1
    module-config: "validator iterator"
    trust-anchor: "{anchor}"
    trust-anchor: "{tampered}"
    trust-anchor: "{chained}"
    trust-anchor-file: "{directory}/rolled.anchor"
    trust-anchor-file: "{directory}/split.anchor"
    local-zone: "test." nodefault
    qname-minimisation: no
    cache-max-negative-ttl: 1
""" + "".join(
        f'stub-zone:\n    name: "{zone}"\n    stub-addr: {NODE_IP}@{NODE_PORT}\n'
        for zone in (PARENT, SECURE, INSECURE, ROLLED, CHAINED)
    ) + f'stub-zone:\n    name: "{TAMPERED}"\n    stub-addr: {NODE_IP}@{PROXY_PORT}\n' + (
        f'stub-zone:\n    name: "{SPLIT}"\n    stub-addr: {NODE_IP}@{NODE_PORT}\n'
    )


@pytest.fixture(scope="module")
def signed(pg_cluster: PgCluster) -> Iterator[Signed]:
    require_root()
    if shutil.which("unbound") is None and not Path("/usr/sbin/unbound").exists():
        pytest.fail("unbound is not installed (scripts/bootstrap installs it)")
    account = pwd.getpwnam(RUN_USER)
    workdir = Path(tempfile.mkdtemp(prefix="valis-dnssec-", dir="/tmp"))
    os.chown(workdir, account.pw_uid, account.pw_gid)
    os.chmod(workdir, 0o755)
    state = workdir / "state"
    state.mkdir(mode=0o700)
    os.chown(state, account.pw_uid, account.pw_gid)
    dsn = pg_cluster.new_database("dnssec")
    with pg_cluster.connect(dsn) as conn:
        migrate(conn)
    import_zone(pg_cluster, dsn, PARENT, extra=PARENT_EXTRA)
    import_zone(pg_cluster, dsn, SECURE, extra=CHILD_EXTRA)
    import_zone(pg_cluster, dsn, INSECURE, extra=CHILD_EXTRA)
    import_zone(pg_cluster, dsn, TAMPERED, extra=CHILD_EXTRA)
    import_zone(pg_cluster, dsn, ROLLED, extra=CHILD_EXTRA)
    import_zone(pg_cluster, dsn, SPLIT, extra=SPLIT_EXTRA)
    import_zone(pg_cluster, dsn, CHAINED, extra=CHAINED_EXTRA)
    wire = Wire()
    unbound: subprocess.Popen[bytes] | None = None
    proxy: subprocess.Popen[bytes] | None = None
    try:
        wire.build()
        with harness() as running:
            facts = site_facts(
                dsn, zones=",".join((PARENT, SECURE, INSECURE, TAMPERED, ROLLED, CHAINED, SPLIT))
            )
            node = running.start(state, facts, netns=wire.node, host=NODE_IP,
                                 dns_port=NODE_PORT)
            node.wait_ready()
            # The operator signs both zones (each algorithm once) and gives the parent
            # the child's DS.
            assert "key tag" in valis_ok("zone", "sign", PARENT, "--algorithm", "13",
                                      "--state-dir", str(state))
            valis_ok("zone", "sign", SECURE, "--algorithm", "15", "--state-dir", str(state))
            child_ds = valis_ok("zone", "ds", SECURE, "--state-dir", str(state)).splitlines()[0]
            ds_rdata = child_ds.split(" IN DS ")[1]
            import_zone(pg_cluster, dsn, PARENT, serial=2,
                        extra=PARENT_EXTRA + f"secure IN DS {ds_rdata}\n")
            anchor = valis_ok("zone", "ds", PARENT, "--state-dir", str(state)).splitlines()[0]
            anchor = anchor.replace(" IN DS ", " DS ")
            valis_ok("zone", "sign", TAMPERED, "--state-dir", str(state))
            tampered = valis_ok("zone", "ds", TAMPERED, "--state-dir", str(state)).splitlines()[0]
            proxy = subprocess.Popen(
                ["ip", "netns", "exec", wire.node, str(REPO / ".venv" / "bin" / "python"),
                 "-c", _TAMPER, NODE_IP, str(PROXY_PORT), str(NODE_PORT)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )
            # Served with a DNSKEY TTL of seconds from the start, so its roll (which waits
            # out the longer of the old and the new DNSKEY TTL) runs in seconds.
            valis_ok("zone", "sign", ROLLED, "--dnskey-ttl", "2", "--state-dir", str(state))
            write_anchor(workdir, valis_ok("zone", "ds", ROLLED, "--state-dir", str(state)))
            assert "KSK key tag" in valis_ok("zone", "sign", SPLIT, "--split", "--algorithm", "15",
                                          "--dnskey-ttl", "2", "--state-dir", str(state))
            write_anchor(workdir, valis_ok("zone", "ds", SPLIT, "--state-dir", str(state)),
                         "split.anchor")
            valis_ok("zone", "sign", CHAINED, "--denial", "nsec3", "--state-dir", str(state))
            chained = valis_ok("zone", "ds", CHAINED, "--state-dir", str(state)).splitlines()[0]
            signed = Signed(wire, node, pg_cluster, dsn, anchor, ds_rdata, workdir, state,
                            chained_anchor=chained.replace(" IN DS ", " DS "))
            wait_for(lambda: "RRSIG" in signed.at_node(f"www.{SECURE}", "A")
                     and "DS" in signed.at_node(SECURE, "DS")
                     and "NSEC3PARAM 1 0 0 -" in signed.at_node(CHAINED, "NSEC3PARAM"), BOUND,
                     "the node to serve the zones signed", interval=0.1)
            (workdir / "unbound.conf").write_text(unbound_conf(
                workdir, anchor, tampered.replace(" IN DS ", " DS "),
                chained.replace(" IN DS ", " DS ")))
            unbound = subprocess.Popen(
                ["ip", "netns", "exec", wire.resolver, "unbound", "-d", "-c",
                 str(workdir / "unbound.conf")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )
            signed.unbound.append(unbound)
            wait_for(lambda: _answers(signed), BOUND, "unbound to answer", interval=0.2)
            yield signed
    finally:
        for process in (unbound, proxy):
            stop_server(process)
        wire.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def write_anchor(workdir: Path, ds_output: str, name: str = "rolled.anchor") -> None:
    """Unbound's trust anchor for ``ROLLED`` (or the zone whose anchor file is ``name``):
    the DS lines ``valis zone ds`` printed, as the parent would hold them."""
    lines = [line.replace(" IN DS ", " DS ") for line in ds_output.splitlines()
             if " IN DS " in line]
    (workdir / name).write_text("\n".join(lines) + "\n")


def _answers(signed: Signed) -> bool:
    try:
        signed.resolve(PARENT, "SOA")
    except AssertionError:
        return False
    return True


def _log(signed: Signed) -> str:
    path = signed.workdir / "unbound.log"
    return path.read_text(errors="replace") if path.exists() else ""


def secure(signed: Signed, name: str, rdtype: str = "A") -> Resolved:
    found = signed.resolve(name, rdtype)
    assert found.status == "NOERROR", (found.raw, _log(signed))
    assert "ad" in found.flags, (found.raw, _log(signed))
    return found


@pytest.mark.parametrize(
    ("name", "rdtype", "expected"),
    [
        (f"www.{PARENT}", "A", "192.0.2.80"),
        (f"www.{PARENT}", "AAAA", "2001:db8::80"),
        (PARENT, "DNSKEY", "DNSKEY"),
        (f"alias.{PARENT}", "A", "192.0.2.80"),
        (f"anything.wild.{PARENT}", "TXT", '"wild"'),
        (f"deep.er.wild.{PARENT}", "TXT", '"wild"'),  # the NSEC covers er.wild, not the name
        (f"deep.er.wild.{SPLIT}", "TXT", '"split"'),  # a split zone, algorithm 15
        (f"x.d.{PARENT}", "TXT", '"wild"'),  # DNAME, its CNAME, then the wildcard
        (f"www.{SECURE}", "A", "198.51.100.80"),
        (SECURE, "DS", "DS"),
    ],
)
def test_data_wildcards_chains_and_a_secure_delegation_validate(
    signed: Signed, name: str, rdtype: str, expected: str
) -> None:
    found = secure(signed, name, rdtype)
    assert any(expected in line for line in found.answer), found.raw


@pytest.mark.parametrize(
    ("name", "rdtype"),
    [
        (f"nope.{PARENT}", "A"),  # does not exist: compact denial, NODATA with NXNAME
        (f"a.b.nope.{PARENT}", "AAAA"),
        (f"www.{PARENT}", "TXT"),  # exists, not this type
        (f"wild.{PARENT}", "A"),  # an empty non-terminal
        (f"x.wild.{PARENT}", "MX"),  # the wildcard has no MX
        (f"deep.er.wild.{PARENT}", "MX"),  # nor two labels down: the NSEC at the name
        (INSECURE, "DS"),  # an insecure delegation proves it has no DS
        (f"nope.{SECURE}", "A"),
    ],
)
def test_denials_validate(signed: Signed, name: str, rdtype: str) -> None:
    found = secure(signed, name, rdtype)
    assert not [line for line in found.answer if f"\tIN\t{rdtype}\t" in line], found.raw


@pytest.mark.parametrize(
    ("name", "status", "secure"),
    [
        (f"www.{PARENT}", "NOERROR", False),  # the signatures over its A and AAAA
        (f"anything.wild.{PARENT}", "NOERROR", False),  # the wildcard's, as it answers
        (f"wild.{PARENT}", "NOERROR", False),  # an empty non-terminal: its NSEC's
        (f"nope.{PARENT}", "NOERROR", False),  # compact denial's NSEC at the name
        (f"www.{CHAINED}", "NOERROR", False),
        (f"ent.{CHAINED}", "NOERROR", True),  # NODATA: its NSEC3 lists no RRSIG
        (f"nope.{CHAINED}", "NXDOMAIN", True),
    ],
)
def test_a_question_for_rrsig_is_answered_not_servfail_at_the_resolver(
    signed: Signed, name: str, status: str, secure: bool
) -> None:
    """A question for RRSIG gets the signatures at the name (a validator passes them on
    unvalidated: there are no signatures over signatures), or a denial that proves it;
    never a NODATA whose own bitmap lists RRSIG, which is bogus (SERVFAIL)."""
    found = signed.resolve(name, "RRSIG")
    assert found.status == status, (found.raw, _log(signed))
    if secure:
        assert "ad" in found.flags, (found.raw, _log(signed))
    else:
        assert any("\tRRSIG\t" in line for line in found.answer), found.raw


def test_an_insecure_delegation_resolves_without_ad(signed: Signed) -> None:
    found = signed.resolve(f"www.{INSECURE}", "A")
    assert found.status == "NOERROR", found.raw
    assert "ad" not in found.flags
    assert any("198.51.100.80" in line for line in found.answer)


def test_a_record_changed_in_postgresql_is_served_signed(signed: Signed) -> None:
    extra = PARENT_EXTRA + f"secure IN DS {signed.child_ds}\nfresh IN A 192.0.2.99\n"
    import_zone(signed.pg, signed.dsn, PARENT, serial=3, extra=extra)
    wait_for(lambda: "192.0.2.99" in signed.at_node(f"fresh.{PARENT}", "A"), BOUND,
             "the node to serve the change", interval=0.05)
    found = secure(signed, f"fresh.{PARENT}", "A")
    assert any("192.0.2.99" in line for line in found.answer)


def test_a_signature_altered_on_the_wire_is_servfail_at_the_resolver(signed: Signed) -> None:
    """The negative control: Unbound really checks the signatures. Through the proxy
    every RRSIG is off by one bit, and the answer is bogus; with checking disabled the
    same data comes through."""
    found = signed.resolve(f"www.{TAMPERED}", "A")
    assert found.status == "SERVFAIL", found.raw
    unchecked = signed.resolve(f"www.{TAMPERED}", "A", "+cd")
    assert unchecked.status == "NOERROR", unchecked.raw
    assert any("198.51.100.80" in line for line in unchecked.answer)
    assert "validation failure" in _log(signed)


def test_delv_says_fully_validated(signed: Signed) -> None:
    if shutil.which("delv") is None:
        pytest.skip("delv (bind9-dnsutils) is not installed")
    name, _, rest = signed.anchor.partition(" DS ")
    tag, algorithm, digest_type, digest = rest.split(" ", 3)
    anchors = signed.workdir / "anchors.conf"
    anchors.write_text(
        f'trust-anchors {{ {name} static-ds {tag} {algorithm} {digest_type} '
        f'"{digest.replace(" ", "")}"; }};\n'
    )
    out = run_in(signed.wire.resolver, [
        "delv", f"@{RESOLVER_IP}", "-a", str(anchors), f"+root={PARENT}",
        f"www.{PARENT}", "A",
    ], check=False, timeout=30)
    assert "; fully validated" in out.stdout, out.stdout + out.stderr


def test_a_zone_signed_with_a_key_this_node_lacks_fails_closed(signed: Signed) -> None:
    """Operator state says the zone is signed with a key another node holds: this node
    answers it SERVFAIL (never unsigned) and says why; the other zones are untouched."""
    run_sql(signed.pg, signed.dsn, (
        "INSERT INTO zone_signing (zone, algorithm, key_tag, set_by) VALUES (%s, 13, 1, %s)",
        (INSECURE, "elsewhere"),
    ))
    try:
        wait_for(lambda: "status: SERVFAIL" in signed.at_node(f"www.{INSECURE}", "A"), BOUND,
                 "the node to fail the zone closed", interval=0.1)
        assert (
            f"dnssec: zone {INSECURE} is signed in operator state with algorithm 13 key tag "
            "1, but this node's state directory holds none for it; answering the zone "
            "SERVFAIL until the key is restored from the backup set"
        ) in signed.node.stderr()
        assert "status: NOERROR" in signed.at_node(f"www.{PARENT}", "A")
    finally:
        run_sql(signed.pg, signed.dsn, ("DELETE FROM zone_signing WHERE zone = %s", (INSECURE,)))
    wait_for(lambda: "status: NOERROR" in signed.at_node(f"www.{INSECURE}", "A"), BOUND,
             "the node to serve the zone unsigned again", interval=0.1)


def _rrsig_tag(text: str, covered: str) -> int | None:
    found = re.search(rf"\tRRSIG\t{covered} \d+ \d+ \d+ \d+ \d+ (\d+) ", text)
    return None if found is None else int(found.group(1))


def _dnskey_tags(signed: Signed) -> set[int]:
    """The key tags of the DNSKEY RRset the node serves for ``ROLLED`` (from the
    RRSIGs over it, one per key signing it)."""
    out = signed.at_node(ROLLED, "DNSKEY")
    return {int(tag) for tag in re.findall(r"\tRRSIG\tDNSKEY \d+ \d+ \d+ \d+ \d+ (\d+) ", out)}


def _metrics(signed: Signed) -> str:
    """The node's /metrics, asked from its namespace as ``valis status`` asks /status."""
    fetch = (
        "import sys, trio\n"
        "from pathlib import Path\n"
        "from valis_core.resident.fabric import fabric_get\n"
        "from valis_core.resident.node_status import fabric_of\n"
        "address, token = fabric_of(Path(sys.argv[1]))\n"
        "status, body = trio.run(fabric_get, address, token, '/metrics')\n"
        "sys.stdout.write(body.decode())\n"
    )
    return run_in(signed.wire.node, [str(runtime_bin() / "python"), "-c", fetch,
                                     str(signed.state)], timeout=30).stdout


def test_a_key_rollover_keeps_the_zone_validating_at_every_step(signed: Signed) -> None:
    """The operator rolls the zone's key in accelerated time (TTLs of seconds): at each
    step Unbound, trusting the DS set the parent holds at that moment, finds the zone
    secure, its data, its keys and a name that does not exist; the parent's DS set follows
    what ``valis zone ds`` prints, and the roll ends signing with the new key alone.
    ``valis status`` and the metrics say how the zone is signed and the roll's step."""
    state = ["--state-dir", str(signed.state)]

    def validates(step: str) -> None:
        for name, rdtype in ((f"www.{ROLLED}", "A"), (ROLLED, "DNSKEY"), (f"nope.{ROLLED}", "A")):
            found = signed.resolve(name, rdtype)
            assert found.status == "NOERROR", (step, found.raw, _log(signed))
            assert "ad" in found.flags, (step, found.raw, _log(signed))

    def parent_publishes() -> None:
        """The parent takes the DS set now printed: Unbound reloads its anchor."""
        write_anchor(signed.workdir, valis_ok("zone", "ds", ROLLED, *state))
        signed.unbound[0].send_signal(signal.SIGHUP)
        wait_for(lambda: _answers(signed), BOUND, "unbound to reload", interval=0.2)

    old = _rrsig_tag(signed.at_node(f"www.{ROLLED}", "A"), "A")
    out = valis_ok("zone", "rollover", ROLLED, *state, "--dnskey-ttl", "2", "--ds-ttl", "1",
                "--max-zone-ttl", "3", "--propagation-delay", "1",
                "--parent-propagation-delay", "1")
    new = int(re.search(r"to (\d+), step ds-submit", out).group(1))  # type: ignore[union-attr]
    assert f"rolling from key tag {old} to {new}" in out
    validates("ds-submit, the parent's DS set as it was")

    def status() -> str:
        return run_in(signed.wire.node, [str(runtime_bin() / "valis"), "status", *state],
                      check=False, timeout=30).stdout

    # The node signs the step once it has read the roll (within a second of the verb).
    wait_for(lambda: "key rollover at step ds-submit for " in status(), BOUND,
             "the node to sign the roll's first step", interval=0.2)
    assert "RRSIG" in signed.at_node(f"www.{ROLLED}", "A")
    shown = status()
    assert (
        f"zone {ROLLED}: signed with algorithm 13, key tag {old} (DNSKEY {old}), compact "
        "denial; signatures valid 14d, made again every 1d, "
    ) in shown, shown
    assert re.search(rf"zone {re.escape(ROLLED)}: .*key rollover at step ds-submit for .*, "
                     "waiting for the parent", shown), shown
    metrics = _metrics(signed)
    assert f'valis_dnssec_rollover_step{{zone="{ROLLED}",step="ds-submit"}} 1\n' in metrics
    assert re.search(rf'valis_dnssec_signatures_cached{{zone="{re.escape(ROLLED)}"}} [1-9]',
                     metrics), metrics
    assert re.search(r'valis_dnssec_signature_cache_total{outcome="miss"} [1-9]', metrics)
    assert len([line for line in valis_ok("zone", "ds", ROLLED, *state).splitlines()
                if " IN DS " in line]) == 2
    parent_publishes()
    validates("ds-submit, the parent holding both DS")
    assert "ds-propagating" in valis_ok("zone", "rollover", ROLLED, *state, "--ds-published")
    validates("ds-propagating")
    wait_for(lambda: _dnskey_tags(signed) == {old, new}, BOUND, "the new key published",
             interval=0.1)
    validates("published")
    wait_for(lambda: _rrsig_tag(signed.at_node(f"www.{ROLLED}", "A"), "A") == new, BOUND,
             "the zone signed with the new key", interval=0.1)
    assert _dnskey_tags(signed) == {old, new}
    validates("switched")
    wait_for(lambda: _dnskey_tags(signed) == {new}, BOUND, "the old key withdrawn",
             interval=0.1)
    validates("ds-retire, the parent still holding both DS")
    parent_publishes()
    validates("ds-retire, the parent holding the new DS alone")
    assert "rollover done" in valis_ok("zone", "rollover", ROLLED, *state, "--ds-published")
    validates("done")
    printed = valis_ok("zone", "ds", ROLLED, *state)
    assert f" DS {new} " in printed
    assert f" DS {old} " not in printed
    assert not list((signed.state / "dnssec").glob(f"Krolled.test+*+{old:05d}.pem"))
    log = signed.node.stderr()
    for step in ("published", "switched", "ds-retire"):  # the node's own steps
        assert f"zone {ROLLED} rollover from key tag {old} to {new}: step {step}" in log


# --- the NSEC3 option ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rdtype", "status"),
    [
        (f"www.{CHAINED}", "A", "NOERROR"),
        (f"anything.wild.{CHAINED}", "TXT", "NOERROR"),  # a wildcard: the next closer covered
        (f"nope.{CHAINED}", "A", "NXDOMAIN"),  # the closest encloser proof
        (f"a.b.nope.{CHAINED}", "AAAA", "NXDOMAIN"),
        (f"www.{CHAINED}", "TXT", "NOERROR"),  # NODATA: the NSEC3 matching the name
        (f"ent.{CHAINED}", "A", "NOERROR"),  # an empty non-terminal's NSEC3
        (f"x.wild.{CHAINED}", "MX", "NOERROR"),  # the wildcard has no MX
        (f"insecure.{CHAINED}", "DS", "NOERROR"),  # an insecure delegation has no DS
        (f"secure.{CHAINED}", "DS", "NOERROR"),
    ],
)
def test_an_nsec3_zone_validates_data_wildcards_and_denials(
    signed: Signed, name: str, rdtype: str, status: str
) -> None:
    found = signed.resolve(name, rdtype)
    assert found.status == status, (found.raw, _log(signed))
    assert "ad" in found.flags, (found.raw, _log(signed))


def _listed(signed: Signed, zone: str, key_name: str) -> Secondary:
    """The resolver's namespace listed as a secondary of ``zone``, with a fresh key."""
    secondary = Secondary(zone, RESOLVER_IP, key_name, "hmac-sha256", secrets.token_bytes(32))
    with signed.pg.connect(signed.dsn) as conn:
        add_secondary(conn, secondary)
    # The node learns of it when the change is announced (within milliseconds): until
    # then a query signed with its key is BADKEY.
    key = f"{secondary.algorithm}:{secondary.key_name}:{secondary.secret_base64}"
    wait_for(lambda: "status: NOERROR" in run_in(signed.wire.resolver, [
        "dig", f"@{NODE_IP}", "-p", str(NODE_PORT), zone, "SOA", "+time=2", "+tries=1",
        "-y", key], check=False, timeout=30).stdout, BOUND, f"the node to know {key_name}",
        interval=0.05)
    return secondary


def _axfr(signed: Signed, zone: str, secondary: Secondary, kind: str = "AXFR") -> str:
    return run_in(signed.wire.resolver, [
        "dig", f"@{NODE_IP}", "-p", str(NODE_PORT), zone, kind, "+time=10", "+tries=1",
        "-y", f"{secondary.algorithm}:{secondary.key_name}:{secondary.secret_base64}",
    ], check=False, timeout=30).stdout


def test_an_axfr_of_the_nsec3_zone_carries_it_fully_signed(signed: Signed) -> None:
    secondary = _listed(signed, CHAINED, "xfr-chained.")
    text = _axfr(signed, CHAINED, secondary)
    records = [line for line in text.splitlines()
               if line and not line.startswith(";") and "\tTSIG\t" not in line]
    assert records[0] == records[-1], text  # the SOA first and last
    path = signed.workdir / "chained.axfr"
    path.write_text("\n".join(records[:-1]) + "\n")
    zone = dns.zone.from_file(str(path), CHAINED, relativize=False)
    types = {rdataset.rdtype for _, rdataset in zone.iterate_rdatasets()}
    assert {dns.rdatatype.NSEC3PARAM, dns.rdatatype.NSEC3, dns.rdatatype.DNSKEY,
            dns.rdatatype.CDS, dns.rdatatype.RRSIG} <= types, text
    nsec3 = [name for name, rdataset in zone.iterate_rdatasets()
             if rdataset.rdtype == dns.rdatatype.NSEC3]
    # apex, ns1, www, *.wild, wild, deep.ent, ent, insecure, secure; the glue beneath the
    # delegations has none
    assert len(nsec3) == 9, text
    verified = run(["ldns-verify-zone", str(path)], check=False)
    assert verified.returncode == 0, (verified.stdout, verified.stderr, text)
    assert "Zone is verified and complete" in verified.stdout
    # The verifier is not lenient: the same transfer lacking one NSEC3 is refused.
    (gone,) = [line for line in records if line.split()[3] == "NSEC3"
               and line.split()[-1] == "NS"]  # the insecure delegation's
    path.write_text("\n".join(line for line in records[:-1] if line != gone) + "\n")
    assert run(["ldns-verify-zone", str(path)], check=False).returncode != 0
    # A change the journal holds: an IXFR of a secondary behind still gets the whole zone
    # signed, never the journal's unsigned difference; one up to date the SOA alone.
    serial = int(records[0].split()[6])
    import_zone(signed.pg, signed.dsn, CHAINED, serial=serial + 1,
                extra=CHAINED_EXTRA + "fresh IN A 192.0.2.99\n")
    wait_for(lambda: f" {serial + 1} 7200 " in signed.at_node(CHAINED, "SOA"), BOUND,
             "the node to serve the change", interval=0.05)
    behind = _axfr(signed, CHAINED, secondary, f"IXFR={serial}")
    assert sum(1 for line in behind.splitlines() if line.split()[3:4] == ["NSEC3"]) == 10
    assert "192.0.2.99" in behind
    current = _axfr(signed, CHAINED, secondary, f"IXFR={serial + 1}")
    assert [line.split()[3] for line in current.splitlines()
            if line and not line.startswith(";")] == ["SOA", "TSIG"], current


def test_a_zone_denying_compactly_is_refused_to_its_secondary(signed: Signed) -> None:
    secondary = _listed(signed, PARENT, "xfr-parent.")
    text = _axfr(signed, PARENT, secondary)
    assert "Transfer failed" in text, text
    assert " IN\tSOA\t" not in text
    wait_for(lambda: "signed with compact denial, which has no chain" in signed.node.stderr(),
             BOUND, "the refusal to be logged", interval=0.1)


def _split_keys(signed: Signed) -> dict[int, int]:
    """The DNSKEY RRset the node serves for ``SPLIT``: each key's tag and its flags."""
    found = {}
    for line in signed.at_node(SPLIT, "DNSKEY").splitlines():
        fields = line.split(None, 4)
        if line.startswith(";") or len(fields) < 5 or fields[3] != "DNSKEY":
            continue
        rdata: Any = dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.DNSKEY, fields[4])
        found[key_tag(rdata.to_wire())] = int(rdata.flags)
    return found


def _split_signers(signed: Signed) -> tuple[int | None, set[int]]:
    """The key signing ``SPLIT``'s data (its www A) and those signing its DNSKEY RRset."""
    keys = signed.at_node(SPLIT, "DNSKEY")
    return (
        _rrsig_tag(signed.at_node(f"www.{SPLIT}", "A"), "A"),
        {int(tag) for tag in re.findall(r"\tRRSIG\tDNSKEY \d+ \d+ \d+ \d+ \d+ (\d+) ", keys)},
    )


def _split_validates(signed: Signed, step: str, asked: Iterator[int]) -> None:
    """Unbound finds ``SPLIT`` secure: its data, its keys, a name that does not exist and
    a wildcard answer, the last two asked afresh at each step (never from its cache)."""
    n = next(asked)
    for name, rdtype in ((f"www.{SPLIT}", "A"), (SPLIT, "DNSKEY"), (f"nope{n}.{SPLIT}", "A"),
                         (f"s{n}.wild.{SPLIT}", "TXT")):
        found = signed.resolve(name, rdtype)
        assert found.status == "NOERROR", (step, name, found.raw, _log(signed))
        assert "ad" in found.flags, (step, name, found.raw, _log(signed))


def test_a_split_zone_validates_and_its_zsk_rolls_by_pre_publication(signed: Signed) -> None:
    """A zone signed with a KSK and a ZSK (algorithm 15): the KSK, whose DS the parent
    holds, signs the DNSKEY RRset and the ZSK the data; Unbound finds it secure. The
    operator rolls the ZSK in accelerated time: the new one is published, then signs, then
    the old one leaves, the node moving each step on alone; Unbound finds the zone secure
    at every step, and the parent's DS never changes."""
    state = ["--state-dir", str(signed.state)]
    asked = itertools.count()
    keys = _split_keys(signed)
    (ksk,) = [tag for tag, flags in keys.items() if flags == 257]
    (old,) = [tag for tag, flags in keys.items() if flags == 256]
    assert _split_signers(signed) == (old, {ksk})
    ds = valis_ok("zone", "ds", SPLIT, *state)
    assert f" DS {ksk} 15 2 " in ds
    assert f" DS {old} " not in ds
    _split_validates(signed, "signed", asked)

    out = valis_ok("zone", "rollover", SPLIT, "--zsk", *state, "--dnskey-ttl", "2",
                "--max-zone-ttl", "3", "--propagation-delay", "1")
    found = re.search(rf"ZSK from key tag {old} to (\d+), step zsk-published", out)
    assert found is not None, out
    new = int(found.group(1))
    wait_for(lambda: set(_split_keys(signed)) == {ksk, old, new}, BOUND,
             "the new ZSK published", interval=0.1)
    assert _split_signers(signed) == (old, {ksk})
    _split_validates(signed, "zsk-published", asked)
    wait_for(lambda: _split_signers(signed)[0] == new, BOUND, "the zone signed by the new ZSK",
             interval=0.1)
    assert set(_split_keys(signed)) == {ksk, old, new}
    _split_validates(signed, "zsk-switched", asked)
    wait_for(lambda: set(_split_keys(signed)) == {ksk, new}, BOUND, "the old ZSK withdrawn",
             interval=0.1)
    assert _split_signers(signed) == (new, {ksk})
    _split_validates(signed, "done", asked)
    assert valis_ok("zone", "ds", SPLIT, *state) == ds
    assert not list((signed.state / "dnssec").glob(f"Ksplit.test+015+{old:05d}.pem"))
    log = signed.node.stderr()
    assert f"zone {SPLIT} rollover from key tag {old} to {new}: step zsk-switched" in log
    assert f"zone {SPLIT} rollover from key tag {old} to {new}: done; ZSK key tag {old}" in log


def test_a_split_zones_ksk_rolls_by_double_ds_while_the_zsk_signs_the_data(
    signed: Signed
) -> None:
    """The KSK of the split zone rolls as a CSK does (Double-DS), the parent's DS set
    following what ``valis zone ds`` prints; the ZSK signs the data throughout, and
    Unbound finds the zone secure at every step."""
    state = ["--state-dir", str(signed.state)]
    asked = itertools.count()
    keys = _split_keys(signed)
    (old,) = [tag for tag, flags in keys.items() if flags == 257]
    (zsk,) = [tag for tag, flags in keys.items() if flags == 256]

    def parent_publishes() -> None:
        write_anchor(signed.workdir, valis_ok("zone", "ds", SPLIT, *state), "split.anchor")
        signed.unbound[0].send_signal(signal.SIGHUP)
        wait_for(lambda: _answers(signed), BOUND, "unbound to reload", interval=0.2)

    out = valis_ok("zone", "rollover", SPLIT, *state, "--dnskey-ttl", "2", "--ds-ttl", "1",
                "--max-zone-ttl", "3", "--propagation-delay", "1",
                "--parent-propagation-delay", "1")
    found = re.search(rf"its KSK from key tag {old} to (\d+), step ds-submit", out)
    assert found is not None, out
    new = int(found.group(1))
    _split_validates(signed, "ds-submit, the parent's DS set as it was", asked)
    parent_publishes()
    _split_validates(signed, "ds-submit, the parent holding both DS", asked)
    assert "ds-propagating" in valis_ok("zone", "rollover", SPLIT, *state, "--ds-published")
    _split_validates(signed, "ds-propagating", asked)
    wait_for(lambda: set(_split_keys(signed)) == {old, new, zsk}, BOUND,
             "the new KSK published", interval=0.1)
    assert _split_signers(signed) == (zsk, {old, new})
    _split_validates(signed, "published", asked)
    wait_for(lambda: set(_split_keys(signed)) == {new, zsk}, BOUND, "the old KSK withdrawn",
             interval=0.1)
    assert _split_signers(signed) == (zsk, {new})
    _split_validates(signed, "ds-retire, the parent still holding both DS", asked)
    parent_publishes()
    _split_validates(signed, "ds-retire, the parent holding the new DS alone", asked)
    assert "rollover done" in valis_ok("zone", "rollover", SPLIT, *state, "--ds-published")
    _split_validates(signed, "done", asked)
    printed = valis_ok("zone", "ds", SPLIT, *state)
    assert f" DS {new} 15 2 " in printed
    assert f" DS {old} " not in printed
    assert f" DS {zsk} " not in printed


def test_a_secondary_fed_by_axfr_serves_the_nsec3_zone_signed(signed: Signed) -> None:
    """NSD, holding no key, serves what the transfer gave it: delv trusting only the
    zone's DS finds its data, a wildcard answer and a name that does not exist fully
    validated, asking NSD alone."""
    if shutil.which("delv") is None:
        pytest.skip("delv (bind9-dnsutils) is not installed")
    secondary_ip = "192.0.2.3"
    run(["ip", "-n", signed.wire.resolver, "addr", "add", f"{secondary_ip}/24", "dev",
         f"vsr-{signed.wire.tag}"])
    secondary = _listed(signed, CHAINED, "xfr-nsd.")
    directory = signed.workdir / "nsd"
    directory.mkdir()
    (directory / "nsd.conf").write_text(nsd_server(directory, secondary_ip, "port: 53") + f"""\
key:
    name: "{secondary.key_name}"
    algorithm: {secondary.algorithm}
    secret: "{secondary.secret_base64}"
zone:
    name: "{CHAINED}"
    zonefile: "chained.zone"
    request-xfr: {NODE_IP}@{NODE_PORT} {secondary.key_name}
    allow-notify: {NODE_IP} {secondary.key_name}
    outgoing-interface: {RESOLVER_IP}
""")
    nsd = subprocess.Popen(
        ["ip", "netns", "exec", signed.wire.resolver, "nsd", "-d", "-c",
         str(directory / "nsd.conf")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        def served() -> bool:
            out = run_in(signed.wire.resolver, [
                "dig", f"@{secondary_ip}", CHAINED, "SOA", "+dnssec", "+norecurse",
                "+time=2", "+tries=1"], check=False, timeout=10).stdout
            return "status: NOERROR" in out and "RRSIG\tSOA" in out

        try:
            wait_for(served, BOUND, "NSD to serve the zone signed", interval=0.2)
        except TimeoutError:
            log = directory / "nsd.log"
            raise AssertionError(
                (log.read_text(errors="replace") if log.exists() else "no NSD log")
                + signed.node.stderr()[-3000:]
            ) from None
        name, _, rest = signed.chained_anchor.partition(" DS ")
        tag, algorithm, digest_type, digest = rest.split(" ", 3)
        anchors = signed.workdir / "chained-anchors.conf"
        anchors.write_text(f'trust-anchors {{ {name} static-ds {tag} {algorithm} '
                           f'{digest_type} "{digest.replace(" ", "")}"; }};\n')
        for qname, rdtype in ((f"www.{CHAINED}", "A"), (f"any.wild.{CHAINED}", "TXT"),
                              (f"nope.{CHAINED}", "A")):
            out = run_in(signed.wire.resolver, [
                "delv", f"@{secondary_ip}", "-a", str(anchors), f"+root={CHAINED}",
                qname, rdtype,
            ], check=False, timeout=30)
            assert "fully validated" in out.stdout, (qname, out.stdout + out.stderr)
    finally:
        stop_server(nsd)
