"""Properties of the launch argv: what the launcher says is what the resident reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.launch import (
    MAX_FD,
    LaunchArgError,
    LaunchRecord,
    parse_launch_argv,
    render_launch_argv,
)

KNOWN_FLAGS = {
    "--resident",
    "--control-socket",
    "--ports",
    "--dns-udp-fd",
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
    dns_udp_fd=fds,
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
        dns_udp_fd=3,
        dns_tcp_fd=4,
        edge_tcp_fd=5,
    )
