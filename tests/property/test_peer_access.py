"""The pg_hba.conf line and ident map that let exactly the run account in: added ahead of
every line that would match first, never twice, and nothing else in the files moves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.operator_state.peer_access import (
    HBA_COMMENT,
    PeerAccess,
    PeerAccessError,
    dba_instructions,
    hba_admits,
    ident_maps,
    with_hba_line,
    with_ident_line,
)

ACCESS = PeerAccess("valis")
OURS = ACCESS.hba_line

DEBIAN_HBA = """\
# Database administrative login by Unix domain socket
local   all             postgres                                peer

# TYPE  DATABASE        USER            ADDRESS                 METHOD

# "local" is for Unix domain socket connections only
local   all             all                                     peer
# IPv4 local connections:
host    all             all             127.0.0.1/32            scram-sha-256
local   replication     all                                     peer
"""

HBA_LINES = st.sampled_from([
    "local   all             postgres                                peer",
    "local   all             all                                     peer",
    "local   all             all                                     trust",
    "local   valis_state     all                                     md5",
    "local   other_db        other                                   peer",
    "local   sameuser        all                                     peer",
    "local   all             +admins                                 peer",
    "local   replication     all                                     peer",
    "host    all             all             127.0.0.1/32            scram-sha-256",
    "hostssl all             valis           ::1/128                 scram-sha-256",
    "# a comment",
    "",
    OURS,
    "local valis_state valis peer map=valis   # ours, with a comment",
    HBA_COMMENT,
])
HBA_TEXT = st.lists(HBA_LINES, max_size=12).map(lambda lines: "\n".join(lines) + "\n")


def test_debian_default_gets_the_line_just_before_local_all_all() -> None:
    edited = with_hba_line(DEBIAN_HBA, ACCESS)
    lines = edited.splitlines()
    ours = lines.index(OURS)
    assert lines[ours + 1].split() == ["local", "all", "all", "peer"]
    assert lines[ours - 1] == HBA_COMMENT
    # The superuser's own line, which cannot match the run account, stays first.
    assert lines.index(DEBIAN_HBA.splitlines()[1]) < ours
    assert hba_admits(edited, ACCESS)
    assert not hba_admits(DEBIAN_HBA, ACCESS)


@given(HBA_TEXT)
def test_the_edited_file_admits_the_run_account_ahead_of_any_broader_line(text: str) -> None:
    edited = with_hba_line(text, ACCESS)
    assert hba_admits(edited, ACCESS)
    assert with_hba_line(edited, ACCESS) == edited


@given(HBA_TEXT)
def test_a_file_that_already_admits_is_left_byte_for_byte(text: str) -> None:
    if hba_admits(text, ACCESS):
        assert with_hba_line(text, ACCESS) == text


@given(HBA_TEXT)
def test_every_other_line_keeps_its_order_and_ours_appears_once(text: str) -> None:
    edited = with_hba_line(text, ACCESS)
    if edited == text:
        return

    def others(body: str) -> list[str]:
        return [line for line in body.splitlines()
                if line.split("#")[0].split() != OURS.split() and line != HBA_COMMENT]

    assert others(edited) == others(text)
    assert [line.split("#")[0].split() for line in edited.splitlines()].count(OURS.split()) == 1


IDENT_LINES = st.sampled_from([
    "# MAPNAME SYSTEM-USERNAME PG-USERNAME", "", "valis  postgres  postgres",
    "valis  valis  valis", "other  valis  valis", "valis  alice  valis",
])


@given(st.lists(IDENT_LINES, max_size=8).map("\n".join))
def test_the_ident_map_takes_the_account_to_the_role_after_one_edit(text: str) -> None:
    edited = with_ident_line(text, ACCESS)
    assert ident_maps(edited, ACCESS)
    assert with_ident_line(edited, ACCESS) == edited
    assert edited.startswith(text)
    if ident_maps(text, ACCESS):
        assert edited == text


def test_a_legacy_run_account_is_mapped_to_the_same_role() -> None:
    legacy = PeerAccess("alice")
    assert legacy.ident_line.split() == ["valis", "alice", "valis"]
    assert legacy.hba_line == OURS


@pytest.mark.parametrize(
    ("role", "database"), [("Valis", "valis_state"), ("valis", "valis-state"), ("v;drop", "x")]
)
def test_names_that_cannot_go_into_the_files_or_the_sql_are_refused(
    role: str, database: str
) -> None:
    with pytest.raises(PeerAccessError, match="identifier"):
        PeerAccess("valis", role, database)


def test_the_dba_is_told_the_exact_sql_and_lines() -> None:
    text = dba_instructions(ACCESS, "/var/run/postgresql")
    assert "CREATE ROLE valis LOGIN;" in text
    assert "CREATE DATABASE valis_state OWNER valis;" in text
    assert OURS in text
    assert ACCESS.ident_line in text
    assert "password" not in text.replace("no password", "")
