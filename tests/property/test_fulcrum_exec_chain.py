"""Properties of the exec chain fulcrum runs the resident through."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fulcrum.errors import LauncherError
from fulcrum.exec_chain import (
    PASSED_THROUGH,
    RESIDENT_PATH,
    RUN_ACCOUNT,
    SETPRIV_DROP,
    build_resident_argv,
    control_socket_path,
    launch_record,
    resident_environment,
    served_ports,
)
from fulcrum.launch import launch_workers
from tests.hypothesis_profiles import scaled
from valis_core.launch import MAX_FD, parse_launch_argv
from valis_core.launcher_config import LauncherConfig, launcher_config_from_mapping

names = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
ids = st.none() | st.integers(1, 2**32 - 2)
ports = st.integers(1, 65535).filter(lambda p: p != 53)
no_nul = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=20)
programs = no_nul.filter(lambda s: "=" not in s).map(lambda s: "/" + s)
env_keys = st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True)
environments = st.dictionaries(env_keys, no_nul, max_size=6)
fds = st.integers(3, MAX_FD)


@st.composite
def configs(draw: st.DrawFn, program: st.SearchStrategy[str] = programs) -> LauncherConfig:
    table: dict[str, Any] = {
        "netns-name": draw(names),
        "unit-ip": "203.0.113.10",
        "unit-cidr": 25,
        "public-interface": draw(names),
        "public-gateway": "203.0.113.1",
        "mode": draw(st.sampled_from(["dedicated", "macvlan", "ipvlan"])),
        "designated-port": draw(st.integers(1, 65535)),
        "catchall-object-path": "/opt/valis/lib/sk-lookup-catchall.bpf.o",
        "valis-command": [draw(program), *draw(st.lists(no_nul, max_size=3))],
    }
    edge, owner = draw(st.none() | ports), draw(st.none() | ports)
    if edge is not None and edge != table["designated-port"]:
        table["edge-port"] = edge
    if owner is not None and owner not in (edge, table["designated-port"]):
        table["owner-port"] = owner
    for key in ("valis-uid", "valis-gid"):
        ident = draw(ids)
        if ident is not None:
            table[key] = ident
    return launcher_config_from_mapping(table)


@st.composite
def launches(draw: st.DrawFn) -> tuple[LauncherConfig, Any, dict[str, str]]:
    cfg = draw(configs())
    record = launch_record(
        cfg,
        dns_udp_fds=(draw(fds),),
        dns_tcp_fd=draw(fds),
        edge_tcp_fd=draw(fds) if cfg.edge_port is not None else None,
        owner_fd=draw(fds) if cfg.owner_port is not None else None,
    )
    return cfg, record, draw(environments)


@settings(max_examples=scaled(0.6))
@given(launches())
def test_argv_enters_the_netns_drops_privilege_then_runs_the_resident(launch: Any) -> None:
    cfg, record, env = launch
    argv = build_resident_argv(cfg, record, env)

    user = RUN_ACCOUNT if cfg.valis_uid is None else str(cfg.valis_uid)
    group = RUN_ACCOUNT if cfg.valis_gid is None else str(cfg.valis_gid)
    head = ["ip", "netns", "exec", cfg.netns_name,
            "setpriv", "--reuid", user, "--regid", group, *SETPRIV_DROP, "env", "-i"]
    assert argv[: len(head)] == head

    rest = argv[len(head):]
    assignments, rest = rest[: len(env)], rest[len(env):]
    assert dict(token.split("=", 1) for token in assignments) == env
    assert assignments == sorted(assignments, key=lambda t: t.split("=", 1)[0])

    command = list(cfg.valis_command)
    assert rest[: len(command)] == command
    assert parse_launch_argv(rest[len(command):]) == record


@settings(max_examples=scaled(0.4))
@given(configs(), fds, fds, fds, fds)
def test_record_serves_every_named_port_and_hands_down_only_bound_descriptors(
    cfg: LauncherConfig, udp: int, tcp: int, edge: int, owner: int
) -> None:
    record = launch_record(
        cfg,
        dns_udp_fds=(udp,),
        dns_tcp_fd=tcp,
        edge_tcp_fd=edge if cfg.edge_port is not None else None,
        owner_fd=owner if cfg.owner_port is not None else None,
    )
    expected = {cfg.designated_port} | {
        p for p in (cfg.edge_port, cfg.owner_port) if p is not None
    }
    assert record.ports == served_ports(cfg) == frozenset(expected)
    assert record.resident
    assert record.control_socket == control_socket_path(cfg)
    assert (record.dns_udp_fd, record.dns_tcp_fd) == (udp, tcp)
    assert (record.edge_tcp_fd is None) == (cfg.edge_port is None)
    assert (record.owner_fd is None) == (cfg.owner_port is None)


@given(st.dictionaries(env_keys | st.sampled_from(sorted(PASSED_THROUGH)), no_nul, max_size=10))
def test_resident_environment_keeps_site_facts_and_systemd_hand_offs_only(
    environ: dict[str, str],
) -> None:
    chosen = resident_environment(environ)
    assert chosen["PATH"] == RESIDENT_PATH
    for key, value in environ.items():
        passed = key.startswith("VALIS_") or key in PASSED_THROUGH
        if key != "PATH":
            assert (chosen.get(key) == value) if passed else key not in chosen
    assert set(chosen) - {"PATH"} <= set(environ)


def test_the_journal_stream_systemd_names_crosses_the_privilege_drop() -> None:
    """The resident inherits fulcrum's stderr; told it is the journal's, it puts each
    line's syslog priority in front (docs/resident.md)."""
    chosen = resident_environment({"JOURNAL_STREAM": "8:41221", "HOME": "/root"})
    assert chosen == {"JOURNAL_STREAM": "8:41221", "PATH": RESIDENT_PATH}


@settings(max_examples=scaled(0.2))
@given(configs(program=no_nul.map(lambda s: "/opt/" + s + "=x")), fds, fds)
def test_a_program_path_env_would_read_as_an_assignment_is_refused(
    cfg: LauncherConfig, udp: int, tcp: int
) -> None:
    record = launch_record(cfg, dns_udp_fds=(udp,), dns_tcp_fd=tcp)
    with pytest.raises(LauncherError, match="contains '='"):
        build_resident_argv(cfg, record, {})


def test_fulcrum_binds_one_udp_socket_per_cpu_it_may_use_unless_told() -> None:
    assert launch_workers({}) == len(os.sched_getaffinity(0))
    assert launch_workers({"VALIS_DNS_WORKERS": "3"}) == 3
    with pytest.raises(LauncherError, match=r"VALIS_DNS_WORKERS 'x' .*site-facts\.env"):
        launch_workers({"VALIS_DNS_WORKERS": "x"})
