"""A zone version's ``Lineage``: the owners replaced since any version it remembers.

``since_mark`` is asked at every swap of a patched zone (the compiled table's move, the
kept answers of the last version), so it looks for the newest versions first; whichever
way it looks, what it gives is the union of the owners of every patch since that
version, ``frozenset()`` for the version itself, and ``None`` for one it does not
remember (another lineage, or further back than ``PAST_PATCHES`` patches or
``PAST_OWNERS`` owners, which it may still remember: a chain forgets in steps).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.dns.zone import _served
from valis_core.dns.zone._served import Lineage

PATCHES = st.lists(st.frozensets(st.sampled_from([b"\x01a\x00", b"\x01b\x00", b"\x01c\x00",
                                                   b"\x00"]), max_size=3), max_size=12)


@settings(max_examples=scaled(1))
@given(PATCHES, st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=8))
def test_since_a_version_is_every_owner_replaced_after_it(
    patches: list[frozenset[bytes]], remembered: int, owners: int
) -> None:
    """Within ``PAST_PATCHES`` patches and ``PAST_OWNERS`` owners, the union of the
    patches since; further back, that or ``None`` (a chain forgets in steps); and what
    a lineage holds stays within twice both."""
    kept = _served.PAST_PATCHES, _served.PAST_OWNERS
    _served.PAST_PATCHES, _served.PAST_OWNERS = remembered, owners
    try:
        lineage, marks = Lineage(), []
        for patch in patches:
            marks.append(lineage.mark)
            lineage = lineage.patched(patch)
            held = held_patches(lineage)
            assert len(held) == lineage.patches <= 2 * remembered
            assert sum(map(len, held)) == lineage.owners <= 2 * owners
        assert lineage.since_mark(lineage.mark) == frozenset()
        for at, mark in enumerate(marks):
            expected = frozenset().union(*patches[at:])
            found = lineage.since_mark(mark)
            if len(patches) - at <= remembered and sum(map(len, patches[at:])) <= owners:
                assert found == expected
            else:
                assert found in (None, expected)
        assert lineage.since_mark(Lineage().mark) is None
    finally:
        _served.PAST_PATCHES, _served.PAST_OWNERS = kept


def held_patches(lineage: Lineage) -> list[frozenset[bytes]]:
    """The owners of each patch a lineage holds, newest first (its chain)."""
    held = []
    while lineage.before is not None:
        held.append(lineage.replaced)
        lineage = lineage.before
    return held


def test_a_long_lineage_is_shown_without_its_chain() -> None:
    """A zone version is shown (a log line, a failed assertion) without walking the
    thousands of lineages before it, which would pass the interpreter's recursion limit."""
    lineage = Lineage()
    for _ in range(3 * _served.PAST_PATCHES):
        lineage = lineage.patched(frozenset({b"\x01a\x00"}))
    shown = repr(lineage)
    assert len(shown) < 200
    assert f"patches={lineage.patches}" in shown
