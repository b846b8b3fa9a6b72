"""The resident's parts on real descriptors, sockets and files: asking the kernel what a
descriptor is, sd_notify datagrams, the configuration store, the store head, and the
fabric endpoint. None of these needs root."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from valis_core import sd_notify
from valis_core.boot import BringUpError
from valis_core.config_store import open_config_store, store_path
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeStats
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.site_facts import SiteFactsError
from valis_core.operator_state.zone_source import ZoneSourceStats
from valis_core.resident.adopt import Kind
from valis_core.resident.descriptors import probe_descriptor
from valis_core.resident.fabric import INFO_FILE, TOKEN_FILE, Fabric, FabricAddress, fabric_get
from valis_core.resident.fabric_stage import check_public_view
from valis_core.resident.state_dir import StateDirError, check_state_dir
from valis_core.resident.views import NodeViews
from valis_core.sd_notify import Notifier
from valis_core.store.head import head_path, materialise_genesis, read_store_head
from valis_core.store.manifest import Manifest, dumps

FACTS = {
    "VALIS_NODE_NAME": "node-a",
    "VALIS_LOCATION": "rack-1",
    "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/run/postgresql",
    "VALIS_SERVED_ZONES": "example.test.",
}


# -- descriptors -------------------------------------------------------------------------


@pytest.fixture
def closing() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def test_the_kernel_says_what_each_descriptor_is(closing: list[socket.socket]) -> None:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    listening = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    listening.bind(("::1", 0))
    listening.listen(1)
    idle = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    idle.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    closing.extend([udp, listening, idle, unix])

    probe = probe_descriptor(udp.fileno())
    assert (probe.kind, probe.host, probe.port) == (Kind.UDP, "127.0.0.1", udp.getsockname()[1])
    probe = probe_descriptor(listening.fileno())
    assert (probe.kind, probe.host) == (Kind.TCP_LISTENING, "::1")
    assert probe_descriptor(idle.fileno()).kind is Kind.TCP_NOT_LISTENING
    assert probe_descriptor(unix.fileno()).kind is Kind.OTHER_SOCKET
    read, write = os.pipe()
    try:
        assert probe_descriptor(read).kind is Kind.NOT_SOCKET
        assert probe_descriptor(read).detail == "a pipe"
    finally:
        os.close(read)
        os.close(write)
    assert probe_descriptor(read).kind is Kind.NOT_OPEN
    # Probing takes nothing over: the socket still works afterwards.
    udp.sendto(b"x", udp.getsockname())
    assert udp.recv(10) == b"x"


# -- sd_notify ---------------------------------------------------------------------------


def test_notifications_reach_a_path_socket_and_an_abstract_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        Notifier.from_environ({"NOTIFY_SOCKET": str(path)}).ready("serving")
        assert listener.recv(4096) == b"READY=1\nSTATUS=serving\n"
    name = f"valis-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        Notifier.from_environ({"NOTIFY_SOCKET": "@" + name}).stopping("bye")
        assert listener.recv(4096) == b"STOPPING=1\nSTATUS=bye\n"


def test_without_notify_socket_notifying_does_nothing() -> None:
    notifier = Notifier.from_environ({})
    assert not notifier.enabled
    notifier.ready("serving")


def test_an_unreachable_supervisor_never_stops_the_node(tmp_path: Path) -> None:
    Notifier(str(tmp_path / "nobody-listens")).ready("serving")


def test_a_supervisor_that_stops_reading_never_blocks_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sd_notify, "SEND_PATIENCE", 0.05)
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        notifier = Notifier(str(path))
        # More than the kernel queues for an unread datagram socket (max_dgram_qlen):
        # every call returns, the first ones are delivered, the rest dropped.
        for number in range(64):
            notifier.status(f"stage {number}")
        listener.setblocking(False)
        delivered = []
        with contextlib.suppress(BlockingIOError):
            while True:
                delivered.append(listener.recv(4096))
    assert delivered[0] == b"STATUS=stage 0\n"
    assert 0 < len(delivered) < 64


# -- state directory, configuration store, store head -----------------------------------


def test_a_state_directory_must_exist_and_be_a_directory(tmp_path: Path) -> None:
    check_state_dir(tmp_path)
    with pytest.raises(StateDirError, match="does not exist"):
        check_state_dir(tmp_path / "absent")
    (tmp_path / "file").write_text("")
    with pytest.raises(StateDirError, match="not a directory"):
        check_state_dir(tmp_path / "file")
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(StateDirError, match="not a directory"):
        check_state_dir(tmp_path / "link")


def test_a_state_directory_owned_by_another_account_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory away")
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    with pytest.raises(StateDirError, match="not by the run account"):
        check_state_dir(other)


def test_the_first_boot_copies_site_facts_once_and_privately(tmp_path: Path) -> None:
    store = open_config_store(tmp_path, {**FACTS, "VALIS_REPL_PORT": "4005", "HOME": "/"})
    assert store.first_boot
    assert dict(store.facts) == FACTS
    assert stat.S_IMODE(store_path(tmp_path).stat().st_mode) == 0o600
    again = open_config_store(tmp_path, {**FACTS, "VALIS_LOCATION": "rack-2"})
    assert not again.first_boot
    assert again.location == "rack-1"
    assert again.ignored == ("VALIS_LOCATION",)
    assert open_config_store(tmp_path, {}).node_name == "node-a"


def test_a_first_boot_without_every_site_fact_writes_nothing(tmp_path: Path) -> None:
    partial = {k: v for k, v in FACTS.items() if k != "VALIS_OPERATOR_STATE_DSN"}
    with pytest.raises(SiteFactsError, match="VALIS_OPERATOR_STATE_DSN"):
        open_config_store(tmp_path, partial)
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_configuration_store_is_refused(tmp_path: Path) -> None:
    open_config_store(tmp_path, FACTS)
    store_path(tmp_path).write_text("VALIS_NODE_NAME=only-this\n")
    with pytest.raises(SiteFactsError, match="damaged"):
        open_config_store(tmp_path, FACTS)


def test_genesis_writes_the_default_manifest_once(tmp_path: Path) -> None:
    manifest, written = materialise_genesis(tmp_path)
    assert written
    assert manifest.generation == 0
    assert stat.S_IMODE(head_path(tmp_path).stat().st_mode) == 0o600
    assert materialise_genesis(tmp_path) == (manifest, False)


def test_an_existing_store_head_is_never_replaced_by_genesis(tmp_path: Path) -> None:
    head_path(tmp_path).parent.mkdir()
    head_path(tmp_path).write_bytes(dumps(Manifest(generation=5)))
    manifest, written = materialise_genesis(tmp_path)
    assert (manifest.generation, written) == (5, False)
    assert read_store_head(tmp_path) == Manifest(generation=5)


# -- the fabric --------------------------------------------------------------------------

ZONE_TEXT = """$ORIGIN example.test.
$TTL 300
@ IN SOA ns1 hostmaster 7 7200 900 1209600 300
@ IN NS ns1
ns1 IN A 192.0.2.53
"""


def node_views() -> NodeViews:
    return NodeViews(
        node="node-a",
        location="rack-1",
        owner_public_key="00" * 32,
        store_generation=0,
        zones=("example.test.",),
        holder=IndexHolder(ZoneIndex.from_zone_text(ZONE_TEXT, "example.test.")),
        serve_stats=ServeStats(),
        zone_stats=ZoneSourceStats(),
        fence_generation=lambda: 0,
        heartbeats=lambda: 1,
    )


async def raw_exchange(address: FabricAddress, data: bytes) -> bytes:
    stream = await trio.open_tcp_stream(address.host, address.port)
    async with stream:
        await stream.send_all(data)
        received = bytearray()
        while chunk := await stream.receive_some(65536):
            received += chunk
    return bytes(received)


async def test_the_fabric_serves_its_views_only_to_token_holders(tmp_path: Path) -> None:
    fabric = Fabric(tmp_path, node_views())
    async with trio.open_nursery() as nursery:
        address: FabricAddress = await nursery.start(fabric.serve)
        info = json.loads((tmp_path / INFO_FILE).read_text())
        assert info["port"] == address.port
        assert stat.S_IMODE((tmp_path / TOKEN_FILE).stat().st_mode) == 0o600
        assert (tmp_path / TOKEN_FILE).read_text().strip() == fabric.token

        assert (await fabric_get(address, "wrong", "/status"))[0] == 403
        response = await raw_exchange(address, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        assert response.startswith(b"HTTP/1.1 401 ")
        # HTTP/1.1 requires Host (RFC 9112 section 3.2): without it, a malformed request.
        hostless = await raw_exchange(address, b"GET /status HTTP/1.1\r\n\r\n")
        assert hostless.startswith(b"HTTP/1.1 400 ")
        assert b"WWW-Authenticate: Bearer" in response

        status, body = await fabric_get(address, fabric.token, "/status")
        assert status == 200
        document = json.loads(body)
        assert document["zones"] == {"example.test.": {"serial": 7, "rcode": "NOERROR"}}
        status, body = await fabric_get(address, fabric.token, "/view/soa?zone=example.test.")
        assert status == 200
        assert json.loads(body)["serial"] == 7
        status, body = await fabric_get(address, fabric.token, "/view/soa?zone=other.test.")
        assert status == 404
        assert json.loads(body)["rcode"] == "REFUSED"
        assert (await fabric_get(address, fabric.token, "/nothing"))[0] == 404

        malformed = await raw_exchange(address, b"\x00\xff garbage\r\n\r\n")
        assert malformed.startswith(b"HTTP/1.1 400 ")
        # It keeps serving after nonsense.
        assert (await fabric_get(address, fabric.token, "/metrics"))[0] == 200
        nursery.cancel_scope.cancel()
    assert not (tmp_path / INFO_FILE).exists()
    assert not (tmp_path / TOKEN_FILE).exists()


async def test_bring_up_asks_the_public_view_for_every_apex_and_names_one_it_lacks(
    tmp_path: Path,
) -> None:
    """The first served apex is asked over the fabric itself, the others of the view its
    route answers from: either way a zone the view does not answer stops the boot with
    the same words."""
    views = node_views()
    fabric = Fabric(tmp_path, views)
    async with trio.open_nursery() as nursery:
        address: FabricAddress = await nursery.start(fabric.serve)
        shown = await check_public_view(address, fabric.token, ["example.test."], (), views)
        assert shown == "example.test. serial 7"
        for zones in (["example.test.", "other.test."], ["other.test.", "example.test."]):
            with pytest.raises(BringUpError, match=r"public view did not answer the apex "
                               r"SOA of other\.test\. \(HTTP 404, rcode REFUSED\)$"):
                await check_public_view(address, fabric.token, zones, (), views)
        nursery.cancel_scope.cancel()


async def test_a_fabric_client_that_never_finishes_its_request_does_not_stall_others(
    tmp_path: Path,
) -> None:
    fabric = Fabric(tmp_path, node_views())
    async with trio.open_nursery() as nursery:
        address: FabricAddress = await nursery.start(fabric.serve)
        stalled = await trio.open_tcp_stream(address.host, address.port)
        async with stalled:
            await stalled.send_all(b"GET /status HTTP/1.1\r\n")
            assert (await fabric_get(address, fabric.token, "/status"))[0] == 200
        nursery.cancel_scope.cancel()
