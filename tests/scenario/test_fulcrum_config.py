"""`fulcrum config produce|verify`: the operator writes this host's launcher config and
re-checks it, through the installed command."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, ensure_system_user
from valis_core.launcher_config import (
    firewall_accept_set,
    parse_launcher_config,
)
from valis_core.launcher_config_file import (
    ProvisioningError,
    config_from_options,
    load_launcher_config,
    produce_config,
)

FULCRUM = Path(sys.executable).with_name("fulcrum")

FIELDS = {
    "netns-name": "valis",
    "unit-ip": "203.0.113.10",
    "unit-cidr": "25",
    "public-interface": "ens7",
    "public-gateway": "203.0.113.1",
    "mode": "dedicated",
    "designated-port": "53",
    "catchall-object-path": "/opt/valis/lib/sk-lookup-catchall.bpf.o",
    "valis-command": "/opt/valis/bin/valis --log-format 'json lines'",
}


def fulcrum(*args: str, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FULCRUM), *args], check=False, capture_output=True, text=True, timeout=60,
        umask=umask,
    )


def produce_args(out: Path, **overrides: str) -> list[str]:
    fields = {**FIELDS, **{k.replace("_", "-"): v for k, v in overrides.items()}}
    args = ["config", "produce", "--out", str(out)]
    for key, value in fields.items():
        args.append(f"--{key}={value}")
    return args


def test_produce_writes_a_0644_config_that_verify_accepts(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    produced = fulcrum(*produce_args(out, edge_port="443"), umask=0o077)
    assert produced.returncode == 0, produced.stderr
    assert f"wrote {out}" in produced.stdout
    info = out.stat()
    assert stat.S_IMODE(info.st_mode) == 0o644
    assert info.st_uid == os.geteuid()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launcher.toml"]

    cfg = parse_launcher_config(out.read_text())
    assert cfg.valis_command == ("/opt/valis/bin/valis", "--log-format", "json lines")
    assert cfg.edge_port == 443
    assert firewall_accept_set(cfg) == {("udp", 53), ("tcp", 53), ("tcp", 443)}

    verified = fulcrum("config", "verify", str(out))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"{out}: ok")
    assert "tcp/443" in verified.stdout


def test_produce_replaces_an_earlier_config_whole(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out)).returncode == 0
    assert fulcrum(*produce_args(out, netns_name="unit2")).returncode == 0
    assert parse_launcher_config(out.read_text()).netns_name == "unit2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launcher.toml"]


def test_produce_says_where_updates_go_and_that_a_change_needs_a_restart(
    tmp_path: Path,
) -> None:
    out = tmp_path / "launcher.toml"
    first = fulcrum(*produce_args(out))
    assert first.returncode == 0, first.stderr
    assert "owner terminus closed (no owner-port" in first.stdout
    assert "systemctl restart" not in first.stdout  # nothing ran on the old one
    opened = fulcrum(*produce_args(out, owner_port="8053"))
    assert opened.returncode == 0, opened.stderr
    assert "owner terminus (DNS UPDATE, TCP) on port 8053" in opened.stdout
    assert "changed: fulcrum reads the launcher config only when it starts: " \
        "`systemctl restart fulcrum-valis` applies" in opened.stdout
    again = fulcrum(*produce_args(out, owner_port="8053"))
    assert again.returncode == 0, again.stderr
    assert "systemctl restart" not in again.stdout
    assert "8053" in fulcrum("config", "verify", str(out)).stdout


def test_produced_files_are_root_owned_on_the_node(tmp_path: Path, as_root: None) -> None:
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out)).returncode == 0
    assert out.stat().st_uid == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("unit-cidr", "33"),
        ("unit-cidr", "twenty"),
        ("public-gateway", "198.51.100.1"),
        ("mode", "bridge"),
        ("valis-command", "valis --resident"),
        ("valis-command", "'/opt/valis/bin/valis"),
        ("catchall-object-path", "lib/sk.bpf.o"),
        ("edge-port", "53"),
    ],
)
def test_a_bad_field_is_one_line_naming_it_and_leaves_no_file(
    tmp_path: Path, field: str, value: str
) -> None:
    out = tmp_path / "launcher.toml"
    result = fulcrum(*produce_args(out, **{field: value}))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"fulcrum: launcher config: {field}: ")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_field_leaves_an_earlier_config_untouched(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out)).returncode == 0
    before = out.read_bytes()
    assert fulcrum(*produce_args(out, mode="bridge")).returncode == 1
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launcher.toml"]


def test_missing_fields_are_named_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    result = fulcrum("config", "produce", "--out", str(out), "--netns-name", "valis")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    for key in ("unit-ip", "public-gateway", "valis-command"):
        assert key in result.stderr
    assert not out.exists()


def test_verify_of_a_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    result = fulcrum("config", "verify", str(missing))
    assert result.returncode == 1
    assert result.stderr == (
        f"fulcrum: launcher config: no file at {missing}; "
        "produce one with `fulcrum config produce`\n"
    )


def test_verify_names_the_file_and_field_of_a_hand_broken_config(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out)).returncode == 0
    out.write_text(out.read_text().replace('mode = "dedicated"', 'mode = "bridge"'))
    result = fulcrum("config", "verify", str(out))
    assert result.returncode == 1
    assert result.stderr.startswith(f"fulcrum: launcher config {out}: mode: ")


def test_verify_refuses_a_config_other_accounts_could_rewrite(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out)).returncode == 0
    out.chmod(0o666)
    result = fulcrum("config", "verify", str(out))
    assert result.returncode == 1
    assert f"chmod 0644 {out}" in result.stderr


@pytest.mark.parametrize("verb", [("launch", "--config"), ("config", "verify")])
def test_a_config_owned_by_the_run_account_is_refused_though_its_mode_is_0644(
    tmp_path: Path, verb: tuple[str, ...]
) -> None:
    require_root()
    account = ensure_system_user(RUN_USER)
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out)).returncode == 0
    os.chown(out, account.pw_uid, account.pw_gid)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    result = fulcrum(*verb, str(out))
    assert result.returncode == 1
    assert result.stderr == (
        f"fulcrum: launcher config: {out} is owned by uid {account.pw_uid} with mode 0644; "
        "only root may change what the privileged launcher reads; run "
        f"`chown root:root {out} && chmod 0644 {out}`\n"
    )


def test_verify_says_when_the_designated_port_is_dropped(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out, designated_port="443")).returncode == 0
    result = fulcrum("config", "verify", str(out))
    assert result.returncode == 0
    assert "warning: designated-port 443 is not in the firewall's accept set" in result.stdout
    assert "set designated-port = 53" in result.stdout


def test_produce_reads_its_file_back_through_a_fresh_parse(tmp_path: Path) -> None:
    out = tmp_path / "launcher.toml"
    cfg = config_from_options(FIELDS)
    produce_config(cfg, out)
    assert load_launcher_config(out) == cfg


def test_produce_into_an_unwritable_place_is_an_operator_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ProvisioningError, match="cannot write"):
        produce_config(config_from_options(FIELDS), blocker / "sub" / "launcher.toml")


def test_loading_something_other_than_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProvisioningError, match="not a regular file"):
        load_launcher_config(tmp_path)


def test_launch_refuses_a_tcp_or_password_dsn_in_its_environment_before_anything(
    tmp_path: Path,
) -> None:
    out = tmp_path / "launcher.toml"
    assert fulcrum(*produce_args(out)).returncode == 0
    for dsn, reason in (
        ("postgresql://valis:hunter2@/valis_state?host=/run/postgresql",
         "it carries a password (password); "),
        ("host=db.example dbname=valis_state",
         "it names the TCP host 'db.example' with no sslmode; "),
    ):
        result = subprocess.run(
            [str(FULCRUM), "launch", "--config", str(out)], check=False, capture_output=True,
            text=True, timeout=60, env={**os.environ, "VALIS_OPERATOR_STATE_DSN": dsn},
        )
        assert result.returncode == 1
        assert result.stderr.startswith(
            f"fulcrum: $VALIS_OPERATOR_STATE_DSN in fulcrum's environment: DSN refused: {reason}"
        ), result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert "hunter2" not in result.stderr
