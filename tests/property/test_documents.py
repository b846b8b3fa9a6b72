"""Every JSON document through ``valis_core.documents``: a faithful round trip, the bytes an
older valis wrote still read (and are written again the same), and a malformed document
refused by its own error naming the field and what was wrong."""

from __future__ import annotations

import io
import ipaddress
import json
import tarfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_cli.commands.demo import DemoError, imported_document
from valis_cli.commands.listings import (
    SECONDARIES,
    SECONDARIES_WITH_SECRETS,
    ZONES,
    SecondaryListing,
    SecondaryListingWithSecret,
    ZoneListing,
)
from valis_core.apply.delivery import DOCUMENT as DELIVERY
from valis_core.apply.delivery import DeliveryError, DeliveryFile, DeliveryManifest
from valis_core.apply.unit_record import DOCUMENT as UNIT_RECORD
from valis_core.apply.unit_record import UnitRecord, UnitRecordError
from valis_core.dns import dnssec, wire
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeStats
from valis_core.dns.serve.rrl import RrlSettings
from valis_core.dns.transfer.secondary_progress import SecondaryState
from valis_core.dns.zone import ZoneIndex
from valis_core.documents import Document
from valis_core.edge.stats import AcmeStatus, EdgeStats
from valis_core.errors import ValisError
from valis_core.fence import MAX_GENERATION, FenceState
from valis_core.fence_verdict import DOCUMENT as VERDICT
from valis_core.fence_verdict import FencedOutVerdict, VerdictUnreadable
from valis_core.operator_state.zone_source import ZoneSourceStats
from valis_core.ops.assess_report import render_report
from valis_core.ops.assessment import Clause
from valis_core.ops.backup_manifest import DOCUMENT as BACKUP
from valis_core.ops.backup_manifest import BackupError, BackupFile, BackupManifest
from valis_core.ops.public_network import PublicNetwork
from valis_core.plugin.dist_home import DOCUMENT as REGISTRATION
from valis_core.plugin.dist_home import DistHomeError, Registration
from valis_core.plugin.installed import DOCUMENT as INSTALLED
from valis_core.plugin.installed import installed_record
from valis_core.plugin.load_probe import REPORT as PROBE_REPORT
from valis_core.plugin.load_probe import ModuleLoadProbeError, ProbeReport
from valis_core.reachability import DnsReachability
from valis_core.resident.fabric import INFO_DOCUMENT as FABRIC_INFO
from valis_core.resident.fabric import FabricError, FabricInfo
from valis_core.resident.status_document import (
    SOA_ANSWER,
    STATUS,
    VIEW_REFUSAL,
    StatusRefused,
    ViewRefusal,
    render_indented,
)
from valis_core.resident.views import NodeViews, public_soa
from valis_core.store.manifest import DOCUMENT as STORE_MANIFEST
from valis_core.store.manifest import ModulePin

CORPUS = Path(__file__).resolve().parents[1] / "fuzz" / "corpus"

shas = st.binary(min_size=32, max_size=32).map(bytes.hex)
segments = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=8)
paths = (
    st.lists(segments, min_size=1, max_size=3)
    .map("/".join)
    .filter(lambda path: all(part not in (".", "..") for part in path.split("/")))
)


def _prefix_free(found: list[str]) -> bool:
    return not any(other.startswith(path + "/") for path in found for other in found)


file_paths = st.lists(paths, max_size=6, unique=True).filter(_prefix_free)
backup_manifests = st.builds(
    lambda owner, generation, listed, digests: BackupManifest(
        owner,
        generation,
        tuple(BackupFile(path, digest, size) for path, (digest, size) in zip(
            ["owner.key", *listed], digests, strict=False
        )),
    ),
    shas,
    st.integers(0, 2**70),
    file_paths.filter(lambda found: not any(p.startswith("owner.key") for p in found)),
    st.lists(st.tuples(shas, st.integers(0, 1 << 40)), min_size=7, max_size=7),
)
delivery_manifests = st.builds(
    lambda version, listed, data: DeliveryManifest(
        version,
        tuple(DeliveryFile(path, digest, mode) for path, (digest, mode) in zip(
            listed, data, strict=False
        )),
    ),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,20}", fullmatch=True),
    file_paths.filter(lambda found: "MANIFEST.json" not in found),
    st.lists(
        st.tuples(shas, st.sampled_from([0o644, 0o755, 0o600, 0o700, 0o400, 0o555, 0])),
        min_size=6,
        max_size=6,
    ),
)
registrations = st.builds(
    Registration,
    st.builds(
        lambda scheme, host, path: f"{scheme}://{host}/{path}",
        st.sampled_from(["https", "http"]),
        st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5}){1,2}", fullmatch=True),
        st.from_regex(r"([a-z0-9]{1,6}/){0,3}", fullmatch=True),
    )
    | st.builds(lambda path: f"file:///{path}/", paths),
)
fences = st.builds(FenceState, st.integers(0, MAX_GENERATION), st.text(min_size=1, max_size=40))
verdicts = st.builds(
    FencedOutVerdict, fences, fences, st.floats(allow_nan=False, allow_infinity=False)
)
unit_records = st.builds(
    UnitRecord, st.integers(1, 2**22), st.integers(0), st.integers(0),
    st.lists(st.text(max_size=20), min_size=1, max_size=5).map(tuple),
)
fabric_infos = st.builds(
    FabricInfo, st.just("127.0.0.1"), st.integers(1, 65535), st.text(max_size=30),
    st.integers(1, 2**22), st.text(max_size=60),
)

module_pins = st.lists(
    st.builds(
        ModulePin,
        st.from_regex(r"[a-z][a-z0-9_-]{0,8}[a-z0-9]", fullmatch=True),
        st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True),
        shas,
    ),
    max_size=4,
    unique_by=lambda pin: pin.name,
).map(lambda pins: tuple(sorted(pins, key=lambda pin: pin.name)))
probe_reports = st.builds(ProbeReport, st.text(max_size=10), st.text(max_size=10),
                          st.integers(0), st.integers(0))
IMPORTED = imported_document()

ROUND_TRIPS: dict[str, tuple[Document[Any], st.SearchStrategy[Any]]] = {
    "installed modules record": (INSTALLED, module_pins),
    "module-load probe report": (PROBE_REPORT, probe_reports),
    "demo's imported.json": (IMPORTED, st.dictionaries(st.text(max_size=20), shas, max_size=4)),
    "backup manifest": (BACKUP, backup_manifests),
    "delivery manifest": (DELIVERY, delivery_manifests),
    "dist registration": (REGISTRATION, registrations),
    "fenced-out verdict": (VERDICT, verdicts),
    "unit record": (UNIT_RECORD, unit_records),
    "fabric.json": (FABRIC_INFO, fabric_infos),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
@given(data=st.data())
def test_every_document_reads_back_what_it_was_written_from(name: str, data: st.DataObject) -> None:
    document, values = ROUND_TRIPS[name]
    value = data.draw(values)
    assert document.structure(document.unstructure(value)) == value
    rendered = document.render(value)
    assert document.read(rendered) == value
    assert document.render(document.read(rendered)) == rendered


# -- documents as an older valis wrote them (the bytes of the code before this module) -----

OLDER: list[tuple[Document[Any], bytes, Any]] = [
    (
        BACKUP,
        b'{\n "files": [\n  {\n   "path": "config/site.toml",\n   "sha256": "'
        + b"cd" * 32
        + b'",\n   "size": 120\n  },\n  {\n   "path": "owner.key",\n   "sha256": "'
        + b"ef" * 32
        + b'",\n   "size": 32\n  },\n  {\n   "path": "store/manifest.json",\n   "sha256": "'
        + b"01" * 32
        + b'",\n   "size": 59\n  }\n ],\n "format": 1,\n "generation": 7,\n '
        b'"owner_public_key": "' + b"ab" * 32 + b'"\n}\n',
        BackupManifest("ab" * 32, 7, (
            BackupFile("config/site.toml", "cd" * 32, 120),
            BackupFile("owner.key", "ef" * 32, 32),
            BackupFile("store/manifest.json", "01" * 32, 59),
        )),
    ),
    (
        DELIVERY,
        b'{\n "files": [\n  {\n   "mode": "0644",\n   "path": "VERSION",\n   "sha256": '
        b'"c47f5b18b8a430e698b9fe15e51f6119984e78334bcf3f45e210d30c37ef2f9e"\n  },\n  {\n'
        b'   "mode": "0755",\n   "path": "bin/valis",\n   "sha256": '
        b'"3612ddaf46e149a4f583faf0face846585148f59e0ce2645594df83b5dc807e8"\n  }\n ],\n'
        b' "format": 1,\n "version": "1.2.3"\n}\n',
        DeliveryManifest("1.2.3", (
            DeliveryFile(
                "VERSION", "c47f5b18b8a430e698b9fe15e51f6119984e78334bcf3f45e210d30c37ef2f9e",
                0o644,
            ),
            DeliveryFile(
                "bin/valis", "3612ddaf46e149a4f583faf0face846585148f59e0ce2645594df83b5dc807e8",
                0o755,
            ),
        )),
    ),
    (
        REGISTRATION,
        b'{"index_url": "https://dist.example.test/simple/"}\n',
        Registration("https://dist.example.test/simple/"),
    ),
    (
        VERDICT,
        b'{"at": 1764800000.25, "fence": {"generation": 5, "holder": '
        b'"node-a@elsewhere#0123456789abcdef"}, "writer": {"generation": 4, "holder": '
        b'"node-a@here#fedcba9876543210"}}',
        FencedOutVerdict(
            FenceState(5, "node-a@elsewhere#0123456789abcdef"),
            FenceState(4, "node-a@here#fedcba9876543210"),
            1764800000.25,
        ),
    ),
    (
        UNIT_RECORD,
        b'{"command": ["valis", "serve", "--state-dir", "/var/lib/valis"], "pid": 4242, '
        b'"pidns": 4026531836, "start": 987654}\n',
        UnitRecord(4242, 987654, 4026531836, ("valis", "serve", "--state-dir", "/var/lib/valis")),
    ),
    (
        FABRIC_INFO,
        b'{"host": "127.0.0.1", "pid": 77, "port": 40123, "token_file": '
        b'"/var/lib/valis/fabric.token", "url": "http://127.0.0.1:40123"}\n',
        FabricInfo("127.0.0.1", 40123, "http://127.0.0.1:40123", 77, "/var/lib/valis/fabric.token"),
    ),
    (
        INSTALLED,
        b'[{"name":"A_x","sha256":"' + b"b" * 64 + b'","version":"2.0"},{"name":"b","sha256":"'
        + b"a" * 64 + b'","version":"1"}]\n',
        (ModulePin("A_x", "2.0", "b" * 64), ModulePin("b", "1", "a" * 64)),
    ),
    (
        PROBE_REPORT,
        b'{"trio": "0.27.0", "dnspython": "2.7.0", "runtime": 51, "fernet": 44}',
        ProbeReport("0.27.0", "2.7.0", 51, 44),
    ),
    (
        IMPORTED,
        b'{"example.test.": "' + b"c" * 64 + b'"}',
        {"example.test.": "c" * 64},
    ),
    (
        STORE_MANIFEST,
        b'{"format":1,"generation":3,"modules":[],"store_head":"' + b"0a" * 32 + b'"}\n',
        None,
    ),
]


@pytest.mark.parametrize(("document", "data", "value"), OLDER, ids=lambda x: getattr(x, "name", ""))
def test_a_document_an_older_valis_wrote_reads_and_is_written_again_byte_for_byte(
    document: Document[Any], data: bytes, value: Any
) -> None:
    read = document.read(data)
    if value is not None:
        assert read == value
    if document is PROBE_REPORT:  # written by the probe module (json.dumps), not valis
        return
    assert document.render(read) == data


def test_the_installed_record_is_the_pins_in_name_order_as_before() -> None:
    pins = [ModulePin("b", "1", "a" * 64), ModulePin("A_x", "2.0", "b" * 64)]
    assert installed_record(pins) == (
        b'[{"name":"A_x","sha256":"' + b"b" * 64 + b'","version":"2.0"},{"name":"b","sha256":"'
        + b"a" * 64 + b'","version":"1"}]\n'
    )


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as opened:
        return {
            member.name: opened.extractfile(member).read()  # type: ignore[union-attr]
            for member in opened.getmembers() if member.isreg()
        }


@pytest.mark.parametrize(
    ("document", "target", "member"),
    [(BACKUP, "backup_set", "BACKUP-MANIFEST.json"), (DELIVERY, "delivery", "MANIFEST.json")],
)
def test_the_kept_seed_archives_manifests_read_and_render_to_the_same_bytes(
    document: Document[Any], target: str, member: str
) -> None:
    seeds = sorted((CORPUS / target).glob("seed-*"))
    assert seeds
    for seed in seeds:
        data = _members(seed.read_bytes())[member]
        assert document.render(document.read(data)) == data


# -- refusals: the document's own error, naming the field and what was wrong ------------

SHA = "ab" * 32


def _backup(**change: Any) -> bytes:
    document: dict[str, Any] = {
        "format": 1, "owner_public_key": SHA, "generation": 3,
        "files": [{"path": "owner.key", "sha256": SHA, "size": 32}],
    }
    document.update(change)
    return json.dumps(document).encode()


def _delivery(**change: Any) -> bytes:
    document: dict[str, Any] = {
        "format": 1, "version": "1.0",
        "files": [{"path": "bin/valis", "sha256": SHA, "mode": "0755"}],
    }
    document.update(change)
    return json.dumps(document).encode()


REFUSALS: list[tuple[Document[Any], type[ValisError], bytes, list[str]]] = [
    (BACKUP, BackupError, b"{", ["BACKUP-MANIFEST.json", "not valid JSON"]),
    (BACKUP, BackupError, _backup(format=2), ["format 2", "newer valis"]),
    (BACKUP, BackupError, _backup(generation=-1), ["generation -1", "non-negative"]),
    (BACKUP, BackupError, _backup(generation="3"), ["generation: expected an integer"]),
    (BACKUP, BackupError, _backup(owner_public_key=SHA.upper()), ["owner_public_key"]),
    (BACKUP, BackupError, _backup(files=[{"path": "owner.key", "sha256": SHA}]),
     ["files[0].size: required field missing"]),
    (BACKUP, BackupError, _backup(files=[{"path": "../x", "sha256": SHA, "size": 1}]),
     ["files[0]: path '../x' is not a plain relative path"]),
    (BACKUP, BackupError, _backup(files=[{"path": "x", "sha256": SHA, "size": 1}]),
     ["does not list the owner seed owner.key"]),
    (BACKUP, BackupError, _backup(files=[{"path": "owner.key", "sha256": SHA, "size": 1}] * 2),
     ["owner.key twice"]),
    (BACKUP, BackupError, _backup(extra=1), ["unknown fields ['extra']"]),
    (DELIVERY, DeliveryError, b"[]", ["MANIFEST.json", "expected a JSON object"]),
    (DELIVERY, DeliveryError, _delivery(version="../1"), ["version '../1' is not a version"]),
    (DELIVERY, DeliveryError,
     _delivery(files=[{"path": "bin/valis", "sha256": SHA, "mode": "4755"}]),
     ["files[0].mode", "four octal digits"]),
    (DELIVERY, DeliveryError,
     _delivery(files=[{"path": "bin/valis", "sha256": SHA, "mode": "0777"}]),
     ["files[0]: mode 0777 is outside 0755"]),
    (DELIVERY, DeliveryError, _delivery(files={}), ["files: expected a list, got an object"]),
    (DELIVERY, DeliveryError,
     _delivery(files=[{"path": "MANIFEST.json", "sha256": SHA, "mode": "0644"}]),
     ["lists the manifest itself"]),
    (DELIVERY, DeliveryError, b'{"format": 1, "format": 1}', ["'format' appears twice"]),
    (REGISTRATION, DistHomeError, b'{"index_url": "https://d.test/", "x": 1}',
     ["registration.json", "unknown fields ['x']", "register the dist again"]),
    (REGISTRATION, DistHomeError, b'{"index_url": "gopher://d.test/"}',
     ["index_url", "not an http, https or file URL"]),
    (REGISTRATION, DistHomeError, b'{"index_url": 7}', ["index_url: expected a string"]),
    (VERDICT, VerdictUnreadable, b'{"at": 0, "fence": {"generation": 5, "holder": ""}, '
     b'"writer": {"generation": 4, "holder": "b"}}',
     ["fence: fence holder must be a non-empty string"]),
    (VERDICT, VerdictUnreadable, b'{"at": "now", "fence": {"generation": 5, "holder": "a"}, '
     b'"writer": {"generation": 4, "holder": "b"}}', ["at: expected a number"]),
    (UNIT_RECORD, UnitRecordError, b'{"command": "valis", "pid": 1, "pidns": 2, "start": 3}',
     ["command: expected a list, got a string"]),
    (UNIT_RECORD, UnitRecordError, b'{"command": ["valis", 1], "pid": 1, "pidns": 2, "start": 3}',
     ["command[1]: expected a string, got an integer"]),
    (PROBE_REPORT, ModuleLoadProbeError, b'{"trio": "0.27", "dnspython": "2.7", "runtime": 5}',
     ["fernet: required field missing"]),
    (IMPORTED, DemoError, b'{"example.test.": 7}', ["['example.test.']: expected a string"]),
    (INSTALLED, ValisError, b'[{"name": "a", "version": "1", "sha256": "x"}]',
     ["[0]: sha256 'x' is not 64 lowercase hex digits"]),
    (FABRIC_INFO, FabricError, b'{"host": "127.0.0.1", "port": "x"}',
     ["url: required field missing", "pid: required field missing"]),
    (FABRIC_INFO, FabricError,
     b'{"host": "127.0.0.1", "port": "x", "url": "", "pid": 1, "token_file": ""}',
     ["port: expected an integer, got a string"]),
]


@pytest.mark.parametrize(("document", "error", "data", "says"), REFUSALS)
def test_a_malformed_document_gets_its_own_refusal_naming_the_field(
    document: Document[Any], error: type[ValisError], data: bytes, says: list[str]
) -> None:
    with pytest.raises(error) as refused:
        document.read(data)
    message = str(refused.value)
    assert message.startswith(document.name)
    # A newer format's remedy is a newer valis; every other, the document's own.
    assert document.remedy in message or "run a valis that reads format" in message
    for fragment in says:
        assert fragment in message
    assert "\n" not in message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
@given(data=st.data())
def test_any_field_replaced_by_any_json_reads_or_is_refused_by_the_document_error(
    name: str, data: st.DataObject
) -> None:
    document, values = ROUND_TRIPS[name]
    tree = json.loads(document.render(data.draw(values)))
    target = tree
    while isinstance(target, dict) and data.draw(st.booleans()):
        inner = [value for value in target.values() if isinstance(value, dict | list) and value]
        if not inner:
            break
        chosen = data.draw(st.sampled_from(inner))
        target = chosen if isinstance(chosen, dict) else data.draw(st.sampled_from(chosen))
    if isinstance(target, dict) and target:
        target[data.draw(st.sampled_from([*sorted(target), "extra"]))] = data.draw(json_values)
    refused: ValisError | None = None
    try:
        document.read(json.dumps(tree).encode())
    except document.error as caught:
        refused = caught
    assert refused is None or str(refused).startswith(document.name)


# -- the node's status: what the fabric sends and valis status prints ---------------------

STATUS_ZONE = """$ORIGIN example.test.
$TTL 300
@ IN SOA ns1 hostmaster 7 7200 900 1209600 300
@ IN NS ns1
ns1 IN A 192.0.2.53
"""


def wired_views() -> NodeViews:
    """A node with every optional part of its status wired: edge and ACME, secondaries,
    rate limits, the database session, the launcher's firewall, a signed zone and one
    whose key it lacks."""
    holder = IndexHolder(ZoneIndex.from_zone_text(STATUS_ZONE, "example.test."))
    holder.sign_with(Signer(
        {wire.from_text("example.test."): dnssec.ZoneKey(dnssec.generate_key(13)),
         wire.from_text("lost.test."): None},
        clock=lambda: 1_800_000_000,
    ))
    edge = EdgeStats(connections=3, handshakes_failed=1)
    edge.responded(200, "h2")
    # Two DNS workers: worker 0 counts into the node's ServeStats, worker 1 its own.
    node_stats, worker_1 = ServeStats(), ServeStats()
    worker_1.udp_rcodes[0], worker_1.udp_compiled, worker_1.udp_dropped = 3, 2, 1
    return NodeViews(
        node="node-a", location="rack-1", owner_public_key="00" * 32, store_generation=4,
        zones=("example.test.", "absent.test."), holder=holder, serve_stats=node_stats,
        udp_workers=(node_stats, worker_1),
        zone_stats=ZoneSourceStats(), fence_generation=lambda: 4, heartbeats=lambda: 1,
        ready=True, dns_udp="192.0.2.1:53", dns_tcp="192.0.2.1:53",
        dns_reachability=DnsReachability(
            served=frozenset({("udp", 5353), ("tcp", 5353)}),
            accepts=frozenset({("udp", 53), ("tcp", 53)}),
        ),
        fence_holder=lambda: "node-a@rack-1#00",
        database=lambda: (False, 1_700_000_000.5),
        modules=("valis-probe==1.0",),
        secondaries=lambda: [
            SecondaryState("example.test.", "192.0.2.9", 6, 1_700_000_000.0, 1, 12.5),
            SecondaryState("example.test.", "192.0.2.10", None, None, None, None),
        ],
        edge_stats=edge,
        edge_not_after=lambda: 1_800_000_000.0,
        acme=lambda: AcmeStatus(
            domain="ns.example.test", directory_url="https://ca.test/dir", orders=2,
            failures_in_a_row=0, last_error=None, last_step="valid", next_attempt=None,
        ),
        rate_limits=lambda: RrlSettings(rate=20, exempt=(ipaddress.ip_network("192.0.2.0/24"),)),
        reload_refused="zone missing.test. is not in the database",
        restart_pending=("VALIS_SERVED_DOMAIN",),
        clock=lambda: 1_700_000_100.0,
        started_at=1_700_000_050.0,
    )


def sent_before(key_tag: int) -> dict[str, Any]:
    """What the fabric sent for ``wired_views`` before the status was a class: the views
    made this dict and the fabric wrote ``json.dumps(document, sort_keys=True)`` and a
    newline (``key_tag``: the signed zone's key, made afresh by each ``wired_views``)."""
    return {
        "database": {
            "connected": False, "following": False, "since": 1700000000.5,
            "serving": "serving the last good snapshot since 2023-11-14T22:13:20Z",
        },
        "dns": {
            "behind_launcher_firewall": True,
            "problem": (
                "designated-port 5353 is not in the firewall's accept set (udp/53, tcp/53): "
                "udp/5353, tcp/5353 dropped, so the resident serves DNS behind a dropped "
                "port and nothing outside the unit gets an answer; set designated-port = 53 "
                "(naming a port there never opens it)"
            ),
            "rate_limiting": {
                "exempt": ["192.0.2.0/24"], "ipv4_prefix": 24, "ipv6_prefix": 56, "rate": 20,
                "slip": 2, "table_size": 393241,
            },
            "reachable_from_outside": False,
            "tcp": "192.0.2.1:53",
            "udp": "192.0.2.1:53",
            "workers": [
                {"answered": 0, "compiled": 0, "dropped": 0, "handed_to_python": 0,
                 "worker": 0},
                {"answered": 3, "compiled": 2, "dropped": 1, "handed_to_python": 1,
                 "worker": 1},
            ],
        },
        "edge": {
            "acme": {
                "directory_url": "https://ca.test/dir", "domain": "ns.example.test",
                "failures_in_a_row": 0, "last_error": None, "last_step": "valid",
                "next_attempt": None, "orders": 2,
            },
            "certificate_not_after": 1800000000.0,
            "connections": 3,
            "displaced": 0,
            "handshakes_failed": 1,
            "responses": 1,
        },
        "fence_generation": 4,
        "fence_holder": "node-a@rack-1#00",
        "generation": 4,
        "location": "rack-1",
        "modules": ["valis-probe==1.0"],
        "node": "node-a",
        "owner_public_key": "00" * 32,
        "ready": True,
        "records": 3,
        "reload_refused": "zone missing.test. is not in the database",
        "restart_pending": ["VALIS_SERVED_DOMAIN"],
        "rollovers": [],
        "secondaries": [
            {"address": "192.0.2.9", "lag_seconds": 12.5, "lag_serials": 1,
             "seen_at": 1700000000.0, "serial": 6, "zone": "example.test."},
            {"address": "192.0.2.10", "lag_seconds": None, "lag_serials": None,
             "seen_at": None, "serial": None, "zone": "example.test."},
        ],
        "signed_zones": [
            {"key_held": False, "zone": "lost.test."},
            {"algorithm": 13, "denial": "compact", "dnskey_tags": [key_tag], "key_held": True,
             "key_tag": key_tag, "rollover_step": None, "signature_refresh_seconds": 86400,
             "signature_validity_seconds": 1209600, "signatures_cached": 0,
             "zone": "example.test."},
        ],
        "started_at": 1700000050.0,
        "uptime_seconds": 50.0,
        "zones": {
            "absent.test.": {"rcode": "REFUSED", "serial": None},
            "example.test.": {"rcode": "NOERROR", "serial": 7},
        },
        "zones_gone_from_database": [],
    }


def signing_key_tag(views: NodeViews) -> int:
    signer = views.holder.signer
    assert signer is not None
    keys = signer.zones[wire.from_text("example.test.")].keys
    assert keys is not None
    return keys.signer.tag


def test_a_fully_wired_status_reads_and_is_sent_byte_for_byte_as_before() -> None:
    views = wired_views()
    status = views.status()
    assert status.edge is not None
    assert status.edge.acme is not None
    assert status.secondaries is not None
    assert len(status.secondaries) == 2
    assert {zone.key_held for zone in status.signed_zones} == {True, False}
    assert status.dns is not None
    assert status.dns.rate_limiting is not None
    document = sent_before(signing_key_tag(views))
    assert STATUS.render(status) == (json.dumps(document, sort_keys=True) + "\n").encode()
    assert render_indented(status) == (
        json.dumps(document, indent=1, sort_keys=True) + "\n"
    ).encode()


def test_a_status_as_an_older_resident_sent_it_reads_with_defaults() -> None:
    older = {"node": "ns1", "location": "lab", "ready": True, "generation": 2,
             "fence_generation": 2, "zones": {"example.test.": {"serial": 7,
                                                                "rcode": "NOERROR"}}}
    status = STATUS.structure(older)
    assert (status.database, status.dns, status.modules, status.rollovers) == (
        None, None, (), ()
    )
    assert STATUS.structure(STATUS.unstructure(status)) == status


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"ready": "yes"}, "ready: expected a boolean, got a string"),
        ({"zones": {"a.": {"serial": "7"}}}, "zones['a.'].serial: expected an integer"),
        ({"dns": {"rate_limiting": {"rate": 1.5}}}, "dns.rate_limiting.rate"),
        ({"signed_zones": [{"zone": "a.", "key_held": False, "key_tag": 5}]},
         "signed_zones[0]: key_tag is given for a zone whose key is not held"),
        ({"surprise": 1}, "unknown fields ['surprise']"),
    ],
)
def test_a_status_with_a_wrong_field_is_refused_naming_it(
    change: dict[str, Any], says: str
) -> None:
    with pytest.raises(StatusRefused) as refused:
        STATUS.read(json.dumps({"node": "ns1", **change}).encode())
    assert says in str(refused.value)
    assert str(refused.value).startswith("the node's status")


@given(data=st.data())
def test_the_status_round_trips(data: st.DataObject) -> None:
    status = wired_views().status()
    changed = attrs.evolve(
        status,
        ready=data.draw(st.booleans()),
        generation=data.draw(st.none() | st.integers(0, MAX_GENERATION)),
        modules=tuple(data.draw(st.lists(st.text(max_size=12), max_size=3))),
        started_at=data.draw(st.none() | st.floats(allow_nan=False, allow_infinity=False)),
    )
    assert STATUS.structure(STATUS.unstructure(changed)) == changed
    assert STATUS.read(STATUS.render(changed)) == changed


def test_the_public_soa_view_is_sent_byte_for_byte_as_before_and_read_back() -> None:
    views = wired_views()
    for zone in views.zones:
        document = public_soa(views.holder, zone).document()
        answer = SOA_ANSWER.structure(document)
        assert answer.answered == (zone == "example.test.")
        assert SOA_ANSWER.render(answer) == (json.dumps(document, sort_keys=True) + "\n").encode()
        assert SOA_ANSWER.read(SOA_ANSWER.render(answer)) == answer
    refusal = VIEW_REFUSAL.render(ViewRefusal("not a zone name: x"))
    assert refusal == b'{"error": "not a zone name: x"}\n'
    with pytest.raises(StatusRefused, match=r"answer: zone: required field missing"):
        SOA_ANSWER.read(refusal)  # what bring-up reads when a view is refused


# -- what the CLI prints with --json: the same bytes the hand-built dicts gave -----------


def test_valis_assess_json_prints_what_it_printed_before() -> None:
    clauses = [Clause("run-account", True, "valis exists"),
               Clause("fence", False, "no fence row", "run valis provision", "late")]
    network = PublicNetwork("pub0", ipaddress.ip_address("198.51.100.7"), 24,
                            ipaddress.ip_address("198.51.100.1"))
    before = {"ok": False, "clauses": [attrs.asdict(clause) for clause in clauses]}
    assert render_report(clauses, None, interface_named=False) == (
        json.dumps(before, indent=1) + "\n"
    )
    with_network = {**before, "public_network": {
        "interface": "pub0", "address": "198.51.100.7", "prefix": 24, "gateway": "198.51.100.1",
    }}
    assert render_report(clauses, network, interface_named=True) == (
        json.dumps(with_network, indent=1) + "\n"
    )
    assert render_report(clauses, None, interface_named=True) == (
        json.dumps({**before, "public_network": None}, indent=1) + "\n"
    )


def test_the_zone_listings_print_what_they_printed_before() -> None:
    zones = (ZoneListing("example.test.", 4, 7, ("node-a",), None),
             ZoneListing("other.test.", 0, None, (), "date"))
    assert ZONES.render(zones) == (json.dumps([
        {"zone": "example.test.", "records": 4, "serial": 7, "served_by": ["node-a"],
         "serial_policy": None},
        {"zone": "other.test.", "records": 0, "serial": None, "served_by": [],
         "serial_policy": "date"},
    ], indent=1) + "\n").encode()
    plain: dict[str, Any] = {"zone": "example.test.", "address": "192.0.2.9", "key_name": "k.",
                             "algorithm": "hmac-sha256"}
    # What it printed before, then the NOTIFY port (issue 31; null: 53) and the catalog
    # the secondary comes from (null: the zone's own).
    assert SECONDARIES.render((SecondaryListing(**plain),)) == (
        json.dumps([{**plain, "notify_port": None, "catalog": None}], indent=1) + "\n"
    ).encode()
    assert SECONDARIES_WITH_SECRETS.render(
        (SecondaryListingWithSecret(**plain, secret="c2VjcmV0", notify_port=5300,
                                    catalog="cat.test."),)
    ) == (json.dumps([{**plain, "secret": "c2VjcmV0", "notify_port": 5300,
                       "catalog": "cat.test."}], indent=1) + "\n").encode()
