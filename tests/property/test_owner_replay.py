"""The owner terminus's replay cache: a signed message accepted once is never accepted
again, whatever the clock does and however full the cache is; it holds at most its
capacity and nothing outside the window; and while the clock goes forward and the window
holds fewer messages than its capacity, every distinct message the time check passes is
accepted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.owner.replay import WINDOW, ReplayCache

KEYS = st.sampled_from(["valis-owner.", "VALIS-OWNER.", "other."])
MACS = st.binary(min_size=1, max_size=2)  # few values, so the same message recurs


@st.composite
def sends(draw: st.DrawFn, *, forward: bool) -> list[tuple[str, int, bytes, int]]:
    """Messages (key, time signed, MAC) sent at a time each: the times going forward,
    or anywhere (a clock stepped back); each time signed within the window of its time."""
    count = draw(st.integers(0, 60))
    now = 1_000_000
    out = []
    for _ in range(count):
        now = now + draw(st.integers(0, 400)) if forward else draw(
            st.integers(1_000_000, 1_002_000))
        signed = now + draw(st.integers(-WINDOW, WINDOW))
        out.append((draw(KEYS), signed, draw(MACS), now))
    return out


@given(sends(forward=False), st.integers(1, 8))
def test_a_message_is_accepted_once_at_most(
    sent: list[tuple[str, int, bytes, int]], capacity: int
) -> None:
    cache = ReplayCache(capacity=capacity)
    accepted: set[tuple[str, int, bytes]] = set()
    for key, signed, mac, now in sent:
        verdict = cache.admit(key, signed, mac, now=now)
        message = (key.lower(), signed, mac)
        if verdict == "fresh":
            assert message not in accepted
            accepted.add(message)
        elif verdict == "replay":
            assert message in accepted
        assert len(cache) <= capacity


@given(sends(forward=True))
def test_while_time_goes_forward_every_distinct_message_is_accepted_and_old_ones_leave(
    sent: list[tuple[str, int, bytes, int]],
) -> None:
    cache = ReplayCache(capacity=len(sent) + 1)
    accepted: set[tuple[str, int, bytes]] = set()
    for key, signed, mac, now in sent:
        message = (key.lower(), signed, mac)
        verdict = cache.admit(key, signed, mac, now=now)
        assert verdict == ("replay" if message in accepted else "fresh")
        accepted.add(message)
        # Held: exactly the messages still within the window (its size follows the rate
        # of messages, not the time the node has run).
        assert len(cache) == sum(1 for _, at, _ in accepted if at >= now - WINDOW)


def test_a_replay_is_refused_within_the_window_and_too_old_after_it() -> None:
    cache = ReplayCache()
    assert cache.admit("valis-owner.", 1000, b"mac", now=1000) == "fresh"
    assert cache.admit("valis-owner.", 1000, b"mac", now=1000 + WINDOW) == "replay"
    assert cache.admit("valis-owner.", 1000, b"other", now=1000) == "fresh"
    # Forgotten once out of the window; a clock stepped back cannot bring it in again.
    assert cache.admit("valis-owner.", 2000, b"later", now=2000) == "fresh"
    assert len(cache) == 1
    assert cache.admit("valis-owner.", 1000, b"mac", now=1000) == "too_old"


def test_a_full_cache_pushes_out_the_oldest_and_refuses_what_was_signed_before_it() -> None:
    cache = ReplayCache(capacity=2)
    assert cache.admit("k.", 100, b"a", now=100) == "fresh"
    assert cache.admit("k.", 101, b"b", now=101) == "fresh"
    assert cache.admit("k.", 102, b"c", now=102) == "fresh"  # "a" leaves
    assert len(cache) == 2
    assert cache.floor == 100
    assert cache.admit("k.", 100, b"a", now=102) == "too_old"
    assert cache.admit("k.", 100, b"new", now=102) == "too_old"
    assert cache.admit("k.", 101, b"b", now=102) == "replay"


def test_nothing_signed_before_the_start_is_accepted() -> None:
    """What the node's previous run accepted is not remembered; nothing signed before
    this run began can be told from a replay of it."""
    cache = ReplayCache(since=5000)
    assert cache.admit("k.", 4999, b"a", now=5000) == "too_old"
    assert cache.admit("k.", 5000, b"a", now=5000) == "fresh"
    assert cache.admit("k.", 5001, b"b", now=5000) == "fresh"


def test_a_cache_without_room_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ReplayCache(capacity=0)
