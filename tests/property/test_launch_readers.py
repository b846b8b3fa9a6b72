"""Every reader of the launch argv reads it the one way: the launch table's (issue 26).

``valis`` asks whether an argv launches the resident, the resident reads its state
directory and its log format from it, and ``valis demo``'s stand-in launcher writes it;
each goes through ``valis_core.launch``, so a flag's value comes out the same whoever
reads it, written ``--flag value`` or ``--flag=value``, among flags it does not know.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.property.test_launch import flatten, groups, records, unknown_flags
from valis_cli.main import run
from valis_core.dev_launcher import resident_argv
from valis_core.launch import (
    LaunchArgError,
    LaunchRecord,
    is_resident_launch,
    parse_launch_argv,
    render_launch_argv,
)
from valis_core.operator_state.site_facts import LOG_FORMATS
from valis_core.resident.log_format import log_format_argument
from valis_core.resident.state_dir import resolve_state_dir, state_dir_argument


@st.composite
def written_argvs(draw: st.DrawFn) -> tuple[LaunchRecord, list[str]]:
    """A record, and an argv naming it as any launcher or operator might write it: each
    value inline or separate, in any order, among flags this version does not know."""
    record = draw(records)
    if draw(st.booleans()):  # a format the resident knows, not only arbitrary words
        record = attrs.evolve(record, log_format=draw(st.sampled_from(sorted(LOG_FORMATS))))
    parts = [
        ["=".join(part)] if len(part) == 2 and draw(st.booleans()) else part
        for part in groups(render_launch_argv(record))
    ]
    parts = draw(st.permutations(parts))
    for extra in draw(st.lists(unknown_flags(), max_size=3)):
        parts.insert(draw(st.integers(0, len(parts))), extra)
    return record, flatten(parts)


@given(written_argvs())
def test_every_reader_reads_a_flag_as_the_launch_record_does(
    written: tuple[LaunchRecord, list[str]],
) -> None:
    record, argv = written
    assert parse_launch_argv(argv) == record
    assert is_resident_launch(argv) is record.resident
    assert state_dir_argument(argv) == record.state_dir
    if record.state_dir is not None:
        assert resolve_state_dir(argv, {"STATE_DIRECTORY": "/elsewhere"}) == Path(
            record.state_dir
        )
    expected_format = record.log_format if record.log_format in LOG_FORMATS else None
    assert log_format_argument(argv) == expected_format


@given(written_argvs())
def test_a_resident_launch_is_known_whatever_else_the_argv_holds(
    written: tuple[LaunchRecord, list[str]],
) -> None:
    _, argv = written
    assert is_resident_launch(["--resident", *argv])
    assert is_resident_launch([*argv, "--resident=yes"])  # the resident refuses it, by name
    assert is_resident_launch([*argv, "--resident", "stray"])


@pytest.mark.parametrize("argv", [
    ["zone", "import", "example.org.zone"],
    ["status", "--json"],
    ["--version"],
    ["demo", "--resident-mode", "x"],
    [],
])
def test_a_command_line_is_no_resident_launch(argv: list[str]) -> None:
    assert not is_resident_launch(argv)


@pytest.mark.parametrize("argv", [
    ["--resident", "--state-dir"],
    ["--resident", "--log-format"],
    ["--resident", "--state-dir", "relative"],
    ["--resident", "--state-dir=/a", "--state-dir", "/b"],
    ["--resident", "--log-format=json", "--log-format", "text"],
])
def test_the_resident_s_own_flags_are_refused_as_any_launch_flag_is(argv: list[str]) -> None:
    with pytest.raises(LaunchArgError):
        parse_launch_argv(argv)
    with pytest.raises(LaunchArgError):
        state_dir_argument(argv)
    with pytest.raises(LaunchArgError):
        log_format_argument(argv)


@given(
    st.integers(0, 1024), st.integers(0, 1024), st.integers(1024, 65535),
    st.none() | st.integers(0, 1024),
    st.text(st.characters(exclude_characters="\0"), min_size=1, max_size=20),
)
def test_the_stand_in_launcher_writes_what_the_resident_reads(
    udp: int, tcp: int, port: int, owner: int | None, name: str
) -> None:
    state_dir = Path("/") / name
    argv = resident_argv(["valis"], udp, tcp, port, state_dir, owner_fd=owner)
    assert argv[0] == "valis"
    assert parse_launch_argv(argv[1:]) == LaunchRecord(
        resident=True, ports=frozenset({port}), dns_udp_fd=udp, dns_tcp_fd=tcp,
        owner_fd=owner, state_dir=str(state_dir),
    )
    assert is_resident_launch(argv[1:])
    assert resolve_state_dir(argv[1:], {}) == state_dir


def test_valis_hands_a_launch_the_resident_refuses_to_the_resident(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Not to its own parser, which would say "unrecognized arguments" about a launch flag.
    with pytest.raises(Exception, match="launch argv: --resident got '--resident=1'"):
        run(["--resident=1"])
