"""The push protocol's two ends, as pure state machines: order, bounds, refusals."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.push_protocol import (
    DESCRIPTOR_LINE,
    MAX_LINE,
    MAX_PORTS,
    Accepted,
    Declared,
    Pushed,
    PushProtocolError,
    PushReceiver,
    ReceiverEvent,
    Refused,
    ReplyReader,
    declare_line,
    reply_line,
)

ports = st.frozensets(st.integers(1, 65535), min_size=1, max_size=MAX_PORTS)
FD = 7


def feed(chunks: list[tuple[bytes, tuple[int, ...]]]) -> list[ReceiverEvent]:
    receiver = PushReceiver()
    events: list[ReceiverEvent] = []
    for data, fds in chunks:
        events += receiver.receive(data, fds)
    return events


def feed_all(receiver: PushReceiver, chunks: list[tuple[bytes, tuple[int, ...]]]) -> None:
    for data, fds in chunks:
        receiver.receive(data, fds)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@given(ports, st.lists(st.integers(0, 400)), st.lists(st.integers(0, 400)),
       st.integers(0, 300))
def test_any_split_of_a_proper_push_gives_the_same_events(
    declared: frozenset[int], head_cuts: list[int], tail_cuts: list[int], glue: int
) -> None:
    # The kernel may glue bytes sent before the descriptor onto the read that carries
    # it, but the descriptor's chunk always holds the DESCRIPTOR line's first byte.
    head, tail = declare_line(declared), DESCRIPTOR_LINE
    glued = glue % (len(head) + 1)
    before, carried_head = head[: len(head) - glued], head[len(head) - glued :]
    first_tail = 1 + (tail_cuts[0] % len(tail) if tail_cuts else len(tail) - 1)
    chunks: list[tuple[bytes, tuple[int, ...]]] = [
        (piece, ()) for piece in split(before, head_cuts)
    ]
    chunks.append((carried_head + tail[:first_tail], (FD,)))
    chunks += [(piece, ()) for piece in split(tail[first_tail:], tail_cuts[1:])]
    assert feed(chunks) == [Declared(declared), Pushed(declared, FD)]


@given(st.lists(st.tuples(st.binary(max_size=80), st.lists(st.integers(0, 99), max_size=3)),
                max_size=12), st.booleans())
def test_garbage_raises_nothing_but_the_protocol_error(
    chunks: list[tuple[bytes, list[int]]], eof: bool
) -> None:
    receiver = PushReceiver()
    reason = ""
    try:
        for data, fds in chunks:
            for event in receiver.receive(data, tuple(fds)):
                assert isinstance(event, Declared | Pushed)
        if eof:
            receiver.receive_eof()
    except PushProtocolError as exc:
        reason = exc.reason
    if reason:
        with pytest.raises(PushProtocolError):
            receiver.receive(b"", ())  # broken for good


@given(st.binary(min_size=MAX_LINE, max_size=MAX_LINE * 3).filter(lambda b: b"\n" not in b),
       st.lists(st.integers(1, 64)))
def test_a_line_past_the_bound_is_refused_without_waiting_for_its_end(
    data: bytes, sizes: list[int]
) -> None:
    receiver = PushReceiver()
    pieces, offset = [], 0
    for size in [*sizes, len(data)]:
        pieces.append(data[offset : offset + size])
        offset += size
    with pytest.raises(PushProtocolError, match="longer than"):
        feed_all(receiver, [(piece, ()) for piece in pieces])


def test_a_descriptor_with_the_declaration_is_refused() -> None:
    receiver = PushReceiver()
    with pytest.raises(PushProtocolError, match="with the port declaration"):
        receiver.receive(declare_line(frozenset({443})), (FD,))


def test_a_descriptor_line_without_a_descriptor_is_refused() -> None:
    receiver = PushReceiver()
    receiver.receive(declare_line(frozenset({443})))
    with pytest.raises(PushProtocolError, match="without a descriptor"):
        receiver.receive(DESCRIPTOR_LINE)


def test_two_descriptors_are_refused_in_one_read_or_two() -> None:
    both: list[list[tuple[bytes, tuple[int, ...]]]] = [
        [(DESCRIPTOR_LINE, (FD, FD + 1))],
        [(DESCRIPTOR_LINE[:3], (FD,)), (DESCRIPTOR_LINE[3:], (FD + 1,))],
    ]
    for chunks in both:
        receiver = PushReceiver()
        receiver.receive(declare_line(frozenset({443})))
        with pytest.raises(PushProtocolError, match="2 descriptors"):
            feed_all(receiver, chunks)


def test_the_descriptor_before_the_declaration_is_refused() -> None:
    receiver = PushReceiver()
    chunks = [(b"P", (FD,)), (declare_line(frozenset({443}))[1:] + DESCRIPTOR_LINE, ())]
    with pytest.raises(PushProtocolError, match="descriptor"):
        feed_all(receiver, chunks)


def test_the_descriptor_in_the_middle_of_its_line_is_refused() -> None:
    receiver = PushReceiver()
    receiver.receive(declare_line(frozenset({443})) + b"DESC")
    with pytest.raises(PushProtocolError, match="middle of a line"):
        receiver.receive(b"RIPTOR\n", (FD,))


def test_anything_after_the_descriptor_is_refused() -> None:
    receiver = PushReceiver()
    receiver.receive(declare_line(frozenset({443})))
    assert receiver.receive(DESCRIPTOR_LINE, (FD,)) == [Pushed(frozenset({443}), FD)]
    with pytest.raises(PushProtocolError, match="more after"):
        receiver.receive(b"x")


@pytest.mark.parametrize("line", [
    b"PUSH/1 PORTS \n", b"PUSH/1 PORTS 0\n", b"PUSH/1 PORTS 70000\n", b"PUSH/1 PORTS 1,1\n",
    b"PUSH/2 PORTS 443\n", b"push/1 ports 443\n", b"PUSH/1 PORTS 443,\n",
    ("PUSH/1 PORTS " + ",".join(str(p) for p in range(1, MAX_PORTS + 2)) + "\n").encode(),
])
def test_a_malformed_declaration_is_refused(line: bytes) -> None:
    with pytest.raises(PushProtocolError):
        PushReceiver().receive(line)


@pytest.mark.parametrize(("sent", "reason"), [
    (b"", "before declaring its ports"),
    (declare_line(frozenset({443})), "before sending its descriptor"),
])
def test_a_resident_that_hangs_up_early_is_refused(sent: bytes, reason: str) -> None:
    receiver = PushReceiver()
    receiver.receive(sent)
    with pytest.raises(PushProtocolError, match=reason):
        receiver.receive_eof()


@given(st.one_of(st.just(Accepted()), st.builds(Refused, st.text(min_size=1, max_size=600))),
       st.lists(st.integers(0, 300)))
def test_every_reply_reads_back_whole_from_any_split(reply: Accepted | Refused,
                                                     cuts: list[int]) -> None:
    line = reply_line(reply)
    assert len(line) <= MAX_LINE
    reader = ReplyReader()
    got = [reader.receive(piece) for piece in split(line, cuts)]
    assert got[-1] is not None
    assert all(item is None for item in got[:-1])
    if isinstance(reply, Accepted):
        assert got[-1] == Accepted()
    else:
        assert isinstance(got[-1], Refused)
        assert got[-1].reason
    assert reader.receive_eof() == got[-1]


@given(st.lists(st.binary(max_size=100), max_size=8))
def test_a_garbage_reply_raises_only_the_protocol_error(chunks: list[bytes]) -> None:
    reader = ReplyReader()
    reason = "none raised"
    try:
        for chunk in chunks:
            reader.receive(chunk)
        reader.receive_eof()
    except PushProtocolError as exc:
        reason = exc.reason
    assert reason


def test_a_reply_that_never_ends_its_line_is_refused_at_the_bound() -> None:
    reader = ReplyReader()
    for _ in range(MAX_LINE - 1):
        assert reader.receive(b"R") is None
    with pytest.raises(PushProtocolError, match="longer than"):
        reader.receive(b"R")


@given(ports)
def test_a_declared_set_reads_back(declared: frozenset[int]) -> None:
    assert PushReceiver().receive(declare_line(declared)) == [Declared(declared)]


def test_the_empty_set_cannot_be_declared() -> None:
    with pytest.raises(PushProtocolError, match="empty"):
        declare_line(frozenset())
