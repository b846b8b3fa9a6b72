"""The fuzz targets: each reader valis points at untrusted bytes, with what must hold.

A target takes one input and a fresh scratch directory and returns normally when the
reader behaved. ``Broken`` means an invariant failed; any other exception escaping a
target is a crash of the reader itself. Both are findings.

- ``answer``: ``answer()`` over the example zone (plus a zone with the harder shapes:
  wildcard, delegation with glue, DNAME, CNAME chain and loop, an RRset too big for
  UDP), served from a snapshot as the server does, over UDP and TCP. A cached answer is
  byte for byte the one the bare index gives afresh. It drops exactly the inputs
  shorter than a header or with QR set; anything else gets a response dnspython parses,
  with QR, the query's ID and opcode, no longer than 512 octets over UDP without EDNS,
  the advertised size (clamped to 512..``SERVER_PAYLOAD``) with it, 65535 over TCP.
- ``fastpath``: the compiled UDP fast path's table over the same zones, learning as the
  serve loop does, and a second one with ``fuzz.example.`` signed: whatever C answers is
  byte for byte what ``answer`` gives over UDP (with the signer for the second);
  the input also goes, as garbage, to the table's other entry points (``put``, ``zone``,
  ``negative``), which may refuse it with ``TypeError``, ``ValueError`` or ``KeyError``
  and must not crash.
- ``tcp_framer``: ``take_frames`` over a byte stream, whole and in pieces: the frames
  and the leftover rebuild the stream exactly, the leftover holds no complete frame,
  feeding in pieces or taking a few per turn (``limit``) gives the same frames, and
  ``framed`` round-trips each frame.
- ``owner_message``: ``receive`` with the owner TSIG key: nothing only for what cannot
  be answered, ``Received`` only for an UPDATE that verifies under the key, otherwise
  a response dnspython parses with the query's ID and a non-zero RCODE.
- ``delivery``: ``assert_delivery_sound`` raises only ``DeliveryError``; a delivery it
  passes is applied under the scratch root and stages exactly its manifest's files.
- ``backup_set``: ``verify_backup_set`` raises only ``BackupError``; a set it passes
  restores into a fresh state directory holding exactly its manifest's files.
- ``copy_rows``: the zone load's lines of COPY text (``zone_load.ZoneRows``), for one
  zone and for two: the compiled row reader gives exactly what the Python way gives
  (zones, refusals, or the same ``OperatorStateError`` at the same line).
- ``master_file``: a master file (the input as UTF-8, bad bytes replaced, as
  ``valis zone check`` and ``import`` read one) through ``check_zone_text``, with the
  origin given and without: it never raises, and the check passes the file exactly
  when the import's reading and checking take it (``parse_zone_text``, then
  ``checked_zone``: they refuse only with ``MasterFileError`` or ``ZoneError``).

The tar targets run confined (``confine.confined``): a write anywhere outside the
scratch directory is ``Broken``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.tsig

from tests.fuzz import generate
from tests.fuzz.confine import confined
from valis_core.apply.delivery import (
    CURRENT_LINK,
    DeliveryError,
    apply_delivery,
    assert_delivery_sound,
)
from valis_core.dns import dnssec
from valis_core.dns.answer import SERVER_PAYLOAD, TCP_LIMIT, Transport, answer, fastpath
from valis_core.dns.answer._fastpath import Table
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.serve.tcp import framed, take_frames
from valis_core.dns.wire import MasterFileError
from valis_core.dns.wire.records import ZoneError
from valis_core.dns.zone import ZoneIndex, rows
from valis_core.dns.zone.build import parse_zone_text
from valis_core.dns.zone.check import check_zone_text
from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.zone_load import ZoneRows
from valis_core.operator_state.zones import checked_zone
from valis_core.ops.backup import BackupError, restore_backup, verify_backup_set
from valis_core.owner.message import Received, receive

if TYPE_CHECKING:
    from valis_core.dns.answer._fastpath import Table

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_ZONE = REPO / "tests" / "scenario" / "data" / "example.com.zone"
PLAIN_UDP = 512
_OPCODE = 0x78

FUZZ_ZONE = """\
$ORIGIN fuzz.example.
$TTL 300
@        SOA  ns1 hostmaster 1 7200 3600 1209600 60
@        NS   ns1
ns1      A    192.0.2.53
*.wild   A    192.0.2.7
*.wild   TXT  "wild"
sub      NS   ns.sub
ns.sub   A    192.0.2.54
dn       DNAME example.com.
loop1    CNAME loop2
loop2    CNAME loop1
chain    CNAME alias.example.com.
x.y.ent  A    192.0.2.8
srv      SRV  0 5 53 ns1
mx       MX   10 ns1
big      TXT  "{a}"
big      TXT  "{b}"
big      TXT  "{c}"
""".format(a="a" * 200, b="b" * 200, c="c" * 200)

INDEX = ZoneIndex.from_zone_texts(
    [(EXAMPLE_ZONE.read_text(), "example.com."), (FUZZ_ZONE, "fuzz.example.")]
)
SNAPSHOT = Snapshot(INDEX)
"""Served as the server serves it: its response cache fills as the inputs arrive."""


class Broken(AssertionError):
    """A reader broke one of its invariants on a fuzz input."""


@attrs.frozen
class Target:
    """One reader under fuzz: how to run an input, and how to make structured ones."""

    name: str
    run: Callable[[bytes, Path], None]
    generate: Callable[[random.Random], bytes]
    expected: tuple[type[Exception], ...] = ()
    """Exceptions the reader may raise for bad input (its own refusal)."""
    compiled: bool = False
    """Whether the reader is the compiled fast path (a tree that has not built it skips
    the target)."""


# -- answer ------------------------------------------------------------------------------


def _udp_limit(query: bytes, response: bytes) -> int:
    """The UDP size limit for ``query``: its advertised payload as dnspython reads it;
    where dnspython cannot read the query (an option whose content it holds to its own
    rules) but the server answered with an OPT, the most any client may be given."""
    try:
        message = dns.message.from_wire(query, keyring=False)
    except Exception:
        answered_with_opt = dns.message.from_wire(response, keyring=False).edns >= 0
        return SERVER_PAYLOAD if answered_with_opt else PLAIN_UDP
    if message.edns < 0:
        return PLAIN_UDP
    return max(PLAIN_UDP, min(message.payload, SERVER_PAYLOAD))


def run_answer(data: bytes, scratch: Path) -> None:
    del scratch
    dropped = len(data) < 12 or bool(data[2] & 0x80)
    for transport in Transport:
        response = answer(SNAPSHOT, data, transport=transport)
        if response != answer(INDEX, data, transport=transport):
            raise Broken(f"{transport.value}: the snapshot's cached answer is not a fresh one")
        if response is None:
            if not dropped:
                raise Broken(f"{transport.value}: dropped a query it must answer")
            continue
        if dropped:
            raise Broken(f"{transport.value}: answered what it must drop")
        if (response[2] ^ data[2]) & _OPCODE:
            raise Broken(f"{transport.value}: the response does not echo the opcode")
        # Parsed as a QUERY: dnspython holds an UPDATE's zone section to stricter rules
        # than a response echoing an odd question has to meet.
        as_query = response[:2] + bytes([response[2] & ~_OPCODE]) + response[3:]
        try:
            message = dns.message.from_wire(as_query, keyring=False)
        except dns.exception.DNSException as exc:
            raise Broken(f"{transport.value}: response does not parse ({exc!r})") from None
        limit = TCP_LIMIT if transport is Transport.TCP else _udp_limit(data, as_query)
        if len(response) > limit:
            raise Broken(f"{transport.value}: {len(response)} octets, over the limit {limit}")
        if message.id != int.from_bytes(data[:2], "big"):
            raise Broken(f"{transport.value}: response ID {message.id} is not the query's")
        if not message.flags & dns.flags.QR:
            raise Broken(f"{transport.value}: response without QR")


# -- the compiled UDP fast path ----------------------------------------------------------

SIGNED_SNAPSHOT = Snapshot(INDEX, signer=Signer(
    {b"\x04fuzz\x07example\x00": dnssec.ZoneKey(dnssec.generate_key(13))},
    clock=lambda: 1_800_000_000,
))
"""The same zones on a node signing ``fuzz.example.`` (and not ``example.com.``)."""


@functools.cache
def fast_tables() -> tuple[tuple[Snapshot, Table], ...]:
    """Each snapshot with its table, made on first use (only where the extension is
    built): each learns as the serve loop's table does, input after input."""
    tables = []
    for snapshot in (SNAPSHOT, SIGNED_SNAPSHOT):
        table = fastpath.table_for(snapshot)
        assert table is not None
        tables.append((snapshot, table))
    return tuple(tables)


def run_fastpath(data: bytes, scratch: Path) -> None:
    from valis_core.dns.answer._fastpath import Table

    del scratch
    for snapshot, table in fast_tables():
        fast, key, wanted = table.ask(data)
        if fast is None:
            answer(snapshot, data, transport=Transport.UDP)
            fastpath.learn(table, snapshot, key, wanted)
            fast, key, wanted = table.ask(data)
        if fast is not None and fast != answer(snapshot, data, transport=Transport.UDP):
            raise Broken("the compiled path's response is not answer()'s")
    garbage = Table(4)
    numbers = tuple(int.from_bytes(data[i : i + 3], "big") for i in range(0, 18, 3))
    calls: list[Callable[[], object]] = [
        lambda: garbage.put(data[:300], (*numbers[:4], data, numbers[4], None)),
        lambda: garbage.put(data, (*numbers[:4], data[:1], numbers[5], data[1:])),
        lambda: garbage.put(data, numbers),
        lambda: garbage.zone(data, ({data: data},), ({data: None},), None, bool(data[:1])),
        lambda: garbage.zone(data[:1] + b"\x00", ({}, {}), ({},), ({data: None},), False,
                             numbers[0] % 5 - 1),
        lambda: garbage.negative(data, numbers[0] % 5, numbers[1] % 300,
                                 (*numbers[2:6], data, 0, None)),
        lambda: garbage.ask(data),
    ]
    for call in calls:
        with contextlib.suppress(TypeError, ValueError, KeyError):
            call()
    garbage.ask(data)


# -- TCP framer ----------------------------------------------------------------------------


def run_tcp_framer(data: bytes, scratch: Path) -> None:
    del scratch
    pending = bytearray(data)
    frames = take_frames(pending)
    if b"".join(framed(frame) for frame in frames) + bytes(pending) != data:
        raise Broken("the frames and the leftover do not rebuild the stream")
    if len(pending) >= 2 and len(pending) >= 2 + (pending[0] << 8 | pending[1]):
        raise Broken("a complete frame was left unread")
    step = 1 + (data[0] % 7 if data else 0)
    pieces: list[bytes] = []
    fed = bytearray()
    for start in range(0, len(data), step):
        fed += data[start : start + step]
        pieces.extend(take_frames(fed))
    if pieces != frames or fed != pending:
        raise Broken(f"fed {step} bytes at a time, the frames differ")
    limit = 1 + (data[-1] % 4 if data else 0)
    turns = bytearray(data)
    taken: list[bytes] = []
    for _ in range(len(data) // 2 + 1):  # each turn that takes a frame eats 2 bytes or more
        batch = take_frames(turns, limit)
        if len(batch) > limit:
            raise Broken(f"took {len(batch)} frames in a turn limited to {limit}")
        if not batch:
            break
        taken.extend(batch)
    if taken != frames or turns != pending:
        raise Broken(f"taken {limit} at a time, the frames differ")
    for frame in frames:
        again = bytearray(framed(frame))
        if take_frames(again) != [frame] or again:
            raise Broken("framed() does not round-trip through take_frames()")


# -- owner terminus ------------------------------------------------------------------------


def run_owner_message(data: bytes, scratch: Path) -> None:
    del scratch
    key = generate.TSIG
    result = receive(data, key)
    if result is None:
        if len(data) >= 12 and not data[2] & 0x80:
            raise Broken("no response to a message that can be answered")
        return
    if isinstance(result, Received):
        keyring = {dns.name.from_text(key.name): dns.tsig.Key(key.name, key.secret, key.algorithm)}
        try:
            message = dns.message.from_wire(data, keyring=keyring)
        except Exception as exc:
            raise Broken(f"received a message that does not verify ({exc!r})") from None
        if message.opcode() != dns.opcode.UPDATE or not message.had_tsig:
            raise Broken("received something other than a signed UPDATE")
        return
    try:
        response = dns.message.from_wire(result, keyring=False)
    except dns.exception.DNSException as exc:
        raise Broken(f"the refusal does not parse ({exc!r})") from None
    if response.id != int.from_bytes(data[:2], "big") or not response.flags & dns.flags.QR:
        raise Broken("the refusal is not a response to this message")
    if response.rcode() == dns.rcode.NOERROR:
        raise Broken("a message that was not received was answered NOERROR")


# -- delivery and backup set ------------------------------------------------------------------


class _UpWhenStaged:
    """A unit controller that reports the unit up when ``current`` holds a whole version
    (what a real unit needs in order to start), so a sound delivery is applied to the end."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def restart(self) -> None:
        pass

    def wait_up(self, timeout: float) -> bool:
        del timeout
        return self.is_up()

    def is_up(self) -> bool:
        return (self._root / CURRENT_LINK).is_dir()

    def stop(self) -> None:
        pass


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir() or p.is_symlink()}


def run_delivery(data: bytes, scratch: Path) -> None:
    tarball = scratch / "delivery.tar.gz"
    tarball.write_bytes(data)
    node = scratch / "node"
    with confined(scratch):
        try:
            manifest = assert_delivery_sound(tarball)
        except DeliveryError:
            return
        applied = apply_delivery(tarball, node, _UpWhenStaged(node), timeout=0)
    staged = _files_under(applied.path)
    if staged != {entry.path for entry in manifest.files}:
        raise Broken(f"staged {sorted(staged)}, not the manifest's files")
    for entry in manifest.files:
        if hashlib.sha256((applied.path / entry.path).read_bytes()).hexdigest() != entry.sha256:
            raise Broken(f"staged {entry.path} with other content than the manifest's")


@contextlib.contextmanager
def _temporary_files_in(scratch: Path) -> Iterator[None]:
    """Point ``tempfile`` at ``scratch`` so a verify's own scratch root lands inside it."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(scratch)
    try:
        yield
    finally:
        tempfile.tempdir = saved


def run_backup_set(data: bytes, scratch: Path) -> None:
    archive = scratch / "backup.tar"
    archive.write_bytes(data)
    state = scratch / "state"
    with confined(scratch), _temporary_files_in(scratch):
        try:
            verified = verify_backup_set(archive)
        except BackupError:
            return
        restore_backup(archive, state)
    restored = _files_under(state)
    if restored != {entry.path for entry in verified.manifest.files}:
        raise Broken(f"restored {sorted(restored)}, not the manifest's files")


# -- copy_rows ---------------------------------------------------------------------------


def _loaded(zones: list[str], data: bytes, *, compiled: bool) -> object:
    """What a zone load makes of ``data`` as its COPY lines: the first error and its
    line, or each zone built (its owners, tree and counts) or refused, and which zones
    hold owners not written plainly."""
    load = ZoneRows(zones, "utf-8", compiled=compiled)
    lines = data.split(b"\n")
    for number, line in enumerate([line + b"\n" for line in lines[:-1]] + [lines[-1]]):
        if not line:
            continue
        try:
            load.add_line(line)
        except OperatorStateError as exc:
            return number, str(exc)
    built, refused = load.finish()
    return load.records, {
        zone: [(z.origin, list(z.nodes.items()), sorted(z.empty_nonterminals),
                list(z.children.items()), z.wildcards, z.record_count, z.soa)
               for z in index.served()]
        for zone, index in built.items()
    }, {zone: str(exc) for zone, exc in refused.items()}, sorted(load.unplain)


def run_copy_rows(data: bytes, scratch: Path) -> None:
    """The zone load over ``data`` as COPY lines, for one zone (lines without the zone
    column) and for two: the compiled way gives what the Python way gives."""
    del scratch
    one = b"\n".join(line.split(b"\t", 1)[-1] for line in data.split(b"\n"))
    for zones, lines in ((["example.com."], one), (["example.com.", "fuzz.example."], data)):
        compiled = _loaded(zones, lines, compiled=rows.COMPILED)
        python = _loaded(zones, lines, compiled=False)
        if compiled != python:
            raise Broken(f"the compiled way gives {compiled!r}, the Python way {python!r}")


# -- master_file -------------------------------------------------------------------------


def run_master_file(data: bytes, scratch: Path) -> None:
    """``valis zone check`` and the build over ``data`` as a master file."""
    del scratch
    text = data.decode("utf-8", "replace")
    check_zone_text(text, None)
    result = check_zone_text(text, "fuzz.example.")
    try:
        checked_zone(parse_zone_text(text, "fuzz.example."))  # as ``valis zone import``
    except (ZoneError, MasterFileError) as exc:
        if result.ok:
            raise Broken(f"the check passed a file the build refuses: {exc}") from None
    else:
        if not result.ok:
            raise Broken(f"the check refused a file the build takes: {result.errors}")


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target("answer", run_answer, generate.dns_query),
        Target("fastpath", run_fastpath, generate.dns_query, compiled=True),
        Target("tcp_framer", run_tcp_framer, generate.tcp_stream),
        Target("owner_message", run_owner_message, generate.signed_update),
        Target("delivery", run_delivery, generate.delivery_tarball, (DeliveryError,)),
        Target("backup_set", run_backup_set, generate.backup_archive, (BackupError,)),
        Target("copy_rows", run_copy_rows, generate.copy_lines, compiled=True),
        Target("master_file", run_master_file, generate.master_file),
    )
}
