"""Properties of the launch argv: what the launcher says is what the resident reads.

Every reader of it reads it the one way, the launch table's (issue 26): ``valis`` asks
whether an argv launches the resident, the resident reads its state directory and its
log format from it, and ``valis demo``'s stand-in launcher writes it; each goes through
``valis_core.launch``, so a flag's value comes out the same whoever reads it, written
``--flag value`` or ``--flag=value``, among flags it does not know.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_cli.main import run
from valis_core.dev_launcher import resident_argv
from valis_core.errors import ValisError
from valis_core.launch import (
    MAX_FD,
    LaunchArgError,
    LaunchRecord,
    is_resident_launch,
    parse_launch_argv,
    render_launch_argv,
)
from valis_core.operator_state.site_facts import LOG_FORMATS
from valis_core.resident.log_format import log_format_argument
from valis_core.resident.state_dir import resolve_state_dir, state_dir_argument

KNOWN_FLAGS = {
    "--resident",
    "--control-socket",
    "--ports",
    "--dns-udp-fd",
    "--dns-udp-fds",
    "--dns-tcp-fd",
    "--owner-fd",
    "--edge-tcp-fd",
    "--state-dir",
    "--log-format",
}
FD_FLAGS = ["--dns-udp-fd", "--dns-tcp-fd", "--owner-fd", "--edge-tcp-fd"]

fds = st.none() | st.integers(0, MAX_FD)
paths = st.text(st.characters(exclude_characters="\0"), max_size=30).map(lambda s: "/" + s)
ports = st.integers(1, 65535)

records = st.builds(
    LaunchRecord,
    resident=st.booleans(),
    control_socket=st.none() | paths,
    ports=st.frozensets(ports, max_size=6),
    dns_udp_fds=st.lists(st.integers(0, MAX_FD), max_size=4, unique=True).map(tuple),
    dns_tcp_fd=fds,
    owner_fd=fds,
    edge_tcp_fd=fds,
    state_dir=st.none() | paths,
    log_format=st.none() | st.text(max_size=8).filter(lambda v: not v.startswith("--")),
)

unknown_names = st.from_regex(r"--[a-z][a-z0-9-]{0,15}", fullmatch=True).filter(
    lambda name: name not in KNOWN_FLAGS
) | st.sampled_from(["--ports-v2", "--resident-mode", "--owner-fd2", "--dns-fd", "--"])
separate_values = st.text(max_size=12).filter(lambda v: not v.startswith("--"))


@st.composite
def unknown_flags(draw: st.DrawFn) -> list[str]:
    """An unknown flag as the launcher might write it: bare, with a value, or name=value."""
    name = draw(unknown_names)
    form = draw(st.sampled_from(["bare", "separate", "inline"]))
    if form == "bare":
        return [name]
    if form == "separate":
        return [name, draw(separate_values)]
    return [f"{name}={draw(st.text(max_size=12))}"]


def groups(argv: list[str]) -> list[list[str]]:
    """Split a canonical argv into flag groups (a flag and its value token, if any)."""
    result: list[list[str]] = []
    for token in argv:
        if token.startswith("--"):
            result.append([token])
        else:
            result[-1].append(token)
    return result


def flatten(parts: list[list[str]]) -> list[str]:
    return [token for part in parts for token in part]


@given(records)
def test_parse_reads_back_what_render_writes(record: LaunchRecord) -> None:
    assert parse_launch_argv(render_launch_argv(record)) == record


@given(records)
def test_render_is_canonical(record: LaunchRecord) -> None:
    argv = render_launch_argv(record)
    assert render_launch_argv(parse_launch_argv(argv)) == argv
    if record.ports:
        token = argv[argv.index("--ports") + 1]
        assert token == ",".join(str(port) for port in sorted(record.ports))


@given(records, st.data())
def test_unknown_flags_anywhere_between_flags_leave_the_record_unchanged(
    record: LaunchRecord, data: st.DataObject
) -> None:
    parts = groups(render_launch_argv(record))
    extras = data.draw(st.lists(unknown_flags(), min_size=1, max_size=4))
    for extra in extras:
        at = data.draw(st.integers(0, len(parts)))
        parts.insert(at, extra)
    assert parse_launch_argv(flatten(parts)) == record


@given(records, st.data())
def test_reordering_flags_leaves_the_record_unchanged(
    record: LaunchRecord, data: st.DataObject
) -> None:
    parts = data.draw(st.permutations(groups(render_launch_argv(record))))
    assert parse_launch_argv(flatten(parts)) == record


@given(records, st.data())
def test_flag_equals_value_means_the_same_as_flag_then_value(
    record: LaunchRecord, data: st.DataObject
) -> None:
    parts = groups(render_launch_argv(record))
    joined = [
        ["=".join(part)] if len(part) == 2 and data.draw(st.booleans()) else part
        for part in parts
    ]
    assert parse_launch_argv(flatten(joined)) == record


@given(st.lists(ports, min_size=1, max_size=10), st.data())
def test_repeated_ports_in_the_set_collapse(listed: list[int], data: st.DataObject) -> None:
    doubled = data.draw(st.permutations(listed + listed[: len(listed) // 2 + 1]))
    token = ",".join(str(port) for port in doubled)
    assert parse_launch_argv(["--ports", token]).ports == frozenset(listed)


@given(st.integers(1, 65535), st.sampled_from(FD_FLAGS), st.integers(0, 1024))
def test_a_port_may_be_both_served_and_handed_down(port: int, flag: str, fd: int) -> None:
    record = parse_launch_argv(["--ports", str(port), flag, str(fd)])
    assert record.ports == {port}
    assert getattr(record, flag[2:].replace("-", "_")) == fd


argv_tokens = st.lists(
    st.sampled_from(sorted(KNOWN_FLAGS)).flatmap(
        lambda flag: st.sampled_from([flag]) | st.text(max_size=8).map(lambda v: f"{flag}={v}")
    )
    | st.sampled_from(["3", "53,443", "/run/s", "", "--", "--x", "-1", "0"])
    | st.text(max_size=8),
    max_size=12,
)


@given(argv_tokens)
def test_any_argv_reads_as_a_record_or_raises_launch_arg_error(argv: list[str]) -> None:
    try:
        record = parse_launch_argv(argv)
    except LaunchArgError:
        return
    assert parse_launch_argv(render_launch_argv(record)) == record


def assert_refused(argv: list[str], flag: str | None, token: str) -> None:
    with pytest.raises(LaunchArgError) as caught:
        parse_launch_argv(argv)
    assert caught.value.flag == flag
    assert caught.value.token == token
    if flag is not None:
        assert flag in str(caught.value)
    assert repr(token) in str(caught.value)


bad_fds = (
    st.text(max_size=8).filter(lambda t: not (t.isascii() and t.isdigit()))
    | st.integers(max_value=-1).map(str)
    | st.integers(min_value=MAX_FD + 1).map(str)
    | st.sampled_from(["", "+3", " 3", "3 ", "1_0", "٣", "0x3", "3.0"])
)


@given(st.sampled_from(FD_FLAGS), bad_fds, st.booleans())
def test_a_malformed_descriptor_is_refused_naming_flag_and_token(
    flag: str, token: str, inline: bool
) -> None:
    if inline:
        assert_refused(["--resident", f"{flag}={token}"], flag, token)
    elif token.startswith("--"):
        assert_refused(["--resident", flag, token], flag, flag)
    else:
        assert_refused(["--resident", flag, token], flag, token)


bad_port_items = (
    st.integers(max_value=0).map(str)
    | st.integers(min_value=65536).map(str)
    | st.text(max_size=6).filter(lambda t: not (t.isascii() and t.isdigit()))
)


@given(st.lists(ports.map(str), max_size=3), bad_port_items, st.lists(ports.map(str), max_size=3))
def test_a_port_outside_the_range_is_refused_naming_flag_and_token(
    before: list[str], bad: str, after: list[str]
) -> None:
    token = ",".join([*before, bad, *after])
    assert_refused([f"--ports={token}"], "--ports", token)


def test_an_empty_port_set_is_refused() -> None:
    assert_refused(["--resident", "--ports="], "--ports", "")
    assert_refused(["--ports", ""], "--ports", "")


@given(records.filter(lambda r: r != LaunchRecord()), st.data())
def test_a_known_flag_given_twice_is_refused(record: LaunchRecord, data: st.DataObject) -> None:
    parts = groups(render_launch_argv(record))
    again = data.draw(st.sampled_from(parts))
    with pytest.raises(LaunchArgError) as caught:
        parse_launch_argv(flatten([*parts, again]))
    assert caught.value.flag == again[0]
    assert "twice" in str(caught.value)


@pytest.mark.parametrize("flag", sorted(KNOWN_FLAGS - {"--resident"}))
def test_a_value_flag_without_its_value_is_refused(flag: str) -> None:
    assert_refused([flag], flag, flag)
    assert_refused([flag, "--resident"], flag, flag)


def test_the_resident_switch_takes_no_value() -> None:
    assert_refused(["--resident=yes"], "--resident", "--resident=yes")


@given(st.text(max_size=10).filter(lambda t: not t.startswith("--")))
def test_a_stray_positional_token_is_refused(token: str) -> None:
    assert_refused(["--resident", token], None, token)
    assert_refused([token, "--resident"], None, token)


def test_an_unknown_flag_written_name_equals_value_carries_its_own_value() -> None:
    assert parse_launch_argv(["--retired=1", "--resident"]) == LaunchRecord(resident=True)
    assert_refused(["--retired=1", "stray"], None, "stray")


def test_a_relative_control_socket_is_refused() -> None:
    assert_refused(["--control-socket", "run/valis.sock"], "--control-socket", "run/valis.sock")


def test_the_record_refuses_values_no_argv_could_carry() -> None:
    with pytest.raises(ValueError, match="ports"):
        LaunchRecord(ports=frozenset({0}))
    with pytest.raises(ValueError, match="owner_fd"):
        LaunchRecord(owner_fd=-1)
    with pytest.raises(ValueError, match="control_socket"):
        LaunchRecord(control_socket="relative.sock")


def test_a_full_launch_reads_as_the_contract_describes() -> None:
    argv = [
        "--resident",
        "--control-socket",
        "/run/valis/control.sock",
        "--ports",
        "443,53",
        "--dns-udp-fd=3",
        "--dns-tcp-fd",
        "4",
        "--retired-flag",
        "value",
        "--edge-tcp-fd",
        "5",
    ]
    assert parse_launch_argv(argv) == LaunchRecord(
        resident=True,
        control_socket="/run/valis/control.sock",
        ports=frozenset({53, 443}),
        dns_udp_fds=(3,),
        dns_tcp_fd=4,
        edge_tcp_fd=5,
    )


# -- every reader reads it the one way ---------------------------------------------


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
        resident=True, ports=frozenset({port}), dns_udp_fds=(udp,), dns_tcp_fd=tcp,
        owner_fd=owner, state_dir=str(state_dir),
    )
    assert is_resident_launch(argv[1:])
    assert resolve_state_dir(argv[1:], {}) == state_dir


def test_valis_hands_a_launch_the_resident_refuses_to_the_resident(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Not to its own parser, which would say "unrecognized arguments" about a launch flag.
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    with pytest.raises(ValisError, match="launch argv: --resident got '--resident=1'"):
        run(["--resident=1"])


# -- the DNS workers' UDP sockets ----------------------------------------------------


@given(st.lists(st.integers(0, MAX_FD), min_size=1, max_size=8, unique=True))
def test_udp_sockets_are_written_one_way_for_one_and_another_for_several(
    udp: list[int],
) -> None:
    record = LaunchRecord(resident=True, dns_udp_fds=tuple(udp))
    argv = render_launch_argv(record)
    if len(udp) == 1:
        # Today's argv exactly: an older resident reads it.
        assert argv == ["--resident", "--dns-udp-fd", str(udp[0])]
    else:
        # Never --dns-udp-fd: an older resident finds no UDP socket and refuses, rather
        # than serving one socket of a group the kernel spreads queries across.
        assert argv == ["--resident", "--dns-udp-fds", ",".join(map(str, udp))]
    assert parse_launch_argv(argv) == record
    assert record.dns_udp_fd == udp[0]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--dns-udp-fds", "3"], "two or more"),
        (["--dns-udp-fds", "3,3"], "named twice"),
        (["--dns-udp-fds", "3,x"], "descriptor number"),
        (["--dns-udp-fd", "3", "--dns-udp-fds", "4,5"], "other spelling"),
    ],
)
def test_malformed_udp_socket_lists_are_refused(argv: list[str], problem: str) -> None:
    with pytest.raises(LaunchArgError, match=problem):
        parse_launch_argv(argv)


def test_a_record_names_each_udp_descriptor_once() -> None:
    with pytest.raises(ValueError, match="twice"):
        LaunchRecord(dns_udp_fds=(3, 3))
