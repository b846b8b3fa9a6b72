"""The two-host topology's pure parts: certificates that fit together, a client bundle
read back as it was issued (and anything else refused), and the certificate line placed
ahead of every TCP line PostgreSQL would take first."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.operator_state.database_host import (
    CA_CERT,
    CA_KEY,
    DatabaseHostError,
    client_bundle,
    read_client_bundle,
)
from valis_core.operator_state.peer_access import hba_fields
from valis_core.operator_state.tls_access import (
    HBA_COMMENT,
    TlsAccess,
    TlsAccessError,
    hba_admits,
    tls_settings,
    with_hba_line,
)
from valis_core.operator_state.tls_material import (
    TlsMaterialError,
    common_name,
    issue_client,
    issue_server,
    issued_by,
    make_ca,
)

NOW = datetime.datetime(2026, 12, 4, tzinfo=datetime.UTC)
CA = make_ca("test", NOW)
ACCESS = TlsAccess("198.51.100.0/24")


def test_a_server_and_a_client_certificate_chain_to_their_ca_and_no_other() -> None:
    server = issue_server(CA, ["db.example", "203.0.113.5"], NOW)
    client = issue_client(CA, "valis", "origin-1", NOW)
    assert issued_by(server.cert_pem, CA.cert_pem)
    assert issued_by(client.cert_pem, CA.cert_pem)
    assert not issued_by(client.cert_pem, make_ca("other", NOW).cert_pem)
    assert common_name(client.cert_pem) == "valis"
    assert common_name(server.cert_pem) == "db.example"


@pytest.mark.parametrize("names", [[], [""], ["db..example"]])
def test_a_server_certificate_needs_names_nodes_can_dial(names: list[str]) -> None:
    with pytest.raises(TlsMaterialError):
        issue_server(CA, names, NOW)


def _ca_dir(tmp_path: Path) -> Path:
    (tmp_path / CA_CERT).write_bytes(CA.cert_pem)
    (tmp_path / CA_KEY).write_bytes(CA.key_pem)
    return tmp_path


def test_a_client_bundle_reads_back_as_issued(tmp_path: Path) -> None:
    data = client_bundle(_ca_dir(tmp_path), "valis", "origin-1", NOW)
    bundle = read_client_bundle(data, source="origin-1.pem")
    assert bundle.ca_pem == CA.cert_pem
    assert common_name(bundle.cert_pem) == "valis"
    assert issued_by(bundle.cert_pem, bundle.ca_pem)
    assert bundle.key_pem in data


def test_a_bundle_whose_parts_do_not_fit_together_is_refused(tmp_path: Path) -> None:
    one = issue_client(CA, "valis", "a", NOW)
    two = issue_client(CA, "valis", "b", NOW)
    stranger = make_ca("stranger", NOW)
    cases = {
        b"": "0 private keys",
        one.cert_pem + two.key_pem + CA.cert_pem: "its key is not the client certificate's",
        one.cert_pem + one.key_pem + stranger.cert_pem: "its CA did not issue",
        one.cert_pem + one.key_pem + two.key_pem + CA.cert_pem: "2 private keys",
        one.cert_pem + one.key_pem: "1 client and 0 CA certificates",
        one.key_pem + CA.cert_pem: "0 client and 1 CA certificates",
    }
    for data, why in cases.items():
        with pytest.raises(DatabaseHostError, match=why):
            read_client_bundle(data, source="bundle.pem")


def test_a_bundle_cannot_be_issued_without_the_ca(tmp_path: Path) -> None:
    with pytest.raises(DatabaseHostError, match="run valis db host"):
        client_bundle(tmp_path, "valis", "origin-1", NOW)


DEBIAN_HBA = """\
local   all             postgres                                peer
local   all             all                                     peer
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
"""

other_lines = st.lists(st.sampled_from([
    "local all all peer",
    "host all all 0.0.0.0/0 scram-sha-256",
    "hostssl valis_state valis 10.0.0.0/8 md5",
    "host other other 192.0.2.0/24 trust",
    "# a comment",
    "",
    "hostnossl all +operators 198.51.100.0/24 reject",
]), max_size=8)


@given(lines=other_lines)
def test_the_certificate_line_comes_before_every_tcp_line_that_could_match(
    lines: list[str]
) -> None:
    text = "\n".join(lines) + "\n"
    edited = with_hba_line(text, ACCESS)
    assert hba_admits(edited, ACCESS)
    assert with_hba_line(edited, ACCESS) == edited  # a second pass changes nothing
    fields = [hba_fields(line) for line in edited.splitlines()]
    ours = fields.index(hba_fields(ACCESS.hba_line))
    for before in fields[:ours]:
        assert not before or before[0] == "local" or before[1] == "other", before
    # Nothing else is lost or reordered.
    kept = [line for line in edited.splitlines() if line not in (ACCESS.hba_line, HBA_COMMENT)]
    assert kept == text.splitlines()


def test_debians_hba_gets_the_line_before_its_host_lines() -> None:
    edited = with_hba_line(DEBIAN_HBA, ACCESS).splitlines()
    assert edited[2:4] == [HBA_COMMENT, "hostssl  valis_state  valis  198.51.100.0/24  cert"]
    assert not hba_admits(DEBIAN_HBA, ACCESS)


def test_the_settings_quote_paths_and_refuse_what_is_not_an_address() -> None:
    settings = tls_settings(listen="203.0.113.5", cert_file="/etc/p/it's.crt",
                            key_file="/k", ca_file="/c")
    assert settings["ssl"] == "on"
    assert settings["ssl_cert_file"] == "'/etc/p/it''s.crt'"
    assert settings["listen_addresses"] == "'203.0.113.5'"
    with pytest.raises(TlsAccessError, match="not an IP address"):
        tls_settings(listen="db.example", cert_file="/c", key_file="/k", ca_file="/a")
    with pytest.raises(TlsAccessError, match="not a client network"):
        TlsAccess("everywhere")
    with pytest.raises(TlsAccessError, match="plain lower-case PostgreSQL identifier"):
        TlsAccess("198.51.100.0/24", role="Robert'); DROP")
