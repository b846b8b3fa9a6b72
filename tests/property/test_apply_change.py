"""Which kind of change a delivery is (valis_core.apply.change): handover or restart."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from valis_core.apply.change import FULCRUM_PROGRAM, STEER_OBJECT, change_kind, restarts_the_unit

digests = st.text("0123456789abcdef", min_size=4, max_size=4)
paths = st.sampled_from([FULCRUM_PROGRAM, STEER_OBJECT, "bin/valis",
                         "lib/systemd/system/fulcrum-valis.service",
                         "lib/systemd/system/fulcrum-valis-control.socket",
                         "share/doc/valis/fulcrum.md", "_internal/base_library.zip"])
files = st.dictionaries(paths, digests, min_size=1)


def _old(new: dict[str, str]) -> dict[str, str]:
    return {path: digest for path, digest in new.items() if restarts_the_unit(path)}


@given(files)
def test_the_first_delivery_starts_the_unit(new: dict[str, str]) -> None:
    assert not change_kind(new, None).handover


@given(files, paths, digests)
def test_a_delivery_is_handed_over_to_exactly_when_no_file_fulcrum_runs_by_changed(
    new: dict[str, str], path: str, digest: str,
) -> None:
    old = _old(new)
    changed = {**new, path: digest}
    kind = change_kind(changed, old)
    moved = restarts_the_unit(path) and old.get(path) != digest
    assert kind.handover is not moved
    if moved:
        assert path in kind.why


@given(files, digests, digests, st.booleans())
def test_fulcrums_program_is_judged_by_what_it_runs_when_both_fingerprints_are_known(
    new: dict[str, str], digest: str, print_: str, same_code: bool,
) -> None:
    old = {**_old(new), FULCRUM_PROGRAM: digest + "0"}  # the program's bytes differ
    new = {**new, FULCRUM_PROGRAM: digest + "1"}
    printed = (print_, print_ if same_code else print_ + "x")
    assert change_kind(new, old, printed).handover is same_code
    assert not change_kind(new, old, (print_, None)).handover  # unknown: by its bytes
