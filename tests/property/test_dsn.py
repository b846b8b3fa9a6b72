"""The operator-state DSN: a socket under peer authentication passes, however it is
spelled, and so does a database host over TLS with a client certificate
(sslmode=verify-full, sslrootcert, sslcert, sslkey); a TCP host or address without the
whole certificate shape, or a password, is refused in one line that never shows the
password."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from valis_core.config_store import open_config_store, store_path
from valis_core.errors import ValisError
from valis_core.operator_state.dsn import (
    CERTIFICATE_KEYS,
    EXAMPLE_DSN,
    EXAMPLE_TLS_DSN,
    CertificateFiles,
    DatabaseHost,
    DsnRefused,
    certificate_files,
    check_operator_dsn,
    database_host,
    dsn_certificate_files,
    dsn_problem,
    parse_dsn,
    render_certificate_dsn,
)
from valis_core.operator_state.local_cluster import socket_dsn
from valis_core.operator_state.site_facts import render_site_facts

names = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True)
# Socket directories: absolute paths of any text but a comma (which makes a host list).
socket_dirs = st.lists(
    st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters=",/"),
            min_size=1, max_size=12),
    min_size=1, max_size=4,
).map(lambda parts: "/" + "/".join(parts))
secrets = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=4,
                  max_size=16).filter(lambda s: "'" not in s and "\\" not in s).map(
    lambda s: "zq" + s  # no word of the refusal's own text starts so
)
tcp_hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True),
    st.sampled_from(["127.0.0.1", "192.0.2.5", "localhost"]),
)


@given(directory=socket_dirs, role=names, database=names, port=st.integers(1, 65535))
def test_every_socket_dsn_passes(directory: str, role: str, database: str, port: int) -> None:
    dsn = socket_dsn(directory, role=role, database=database, port=port)
    assert check_operator_dsn(dsn, source="test") == dsn


@pytest.mark.parametrize(
    "dsn",
    [
        EXAMPLE_DSN,
        "postgresql://valis@%2Fvar%2Frun%2Fpostgresql/valis_state",
        "postgresql:///valis_state",
        "postgresql://valis@/valis_state",
        "dbname=valis_state user=valis",
        "host=/var/run/postgresql dbname=valis_state",
        "host='' dbname=valis_state",
        "host=/run/a,/run/b dbname=valis_state",
        "postgresql://valis@/valis_state?host=/run/postgresql&sslmode=disable",
        "",
    ],
)
def test_the_socket_spellings_pass(dsn: str) -> None:
    assert check_operator_dsn(dsn, source="test") == dsn


def _conninfo_quoted(value: str) -> str:
    """A value inside libpq's single quotes: a quote or backslash escaped by a backslash."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


@given(secret=secrets, directory=socket_dirs)
@example(secret="zq0000", directory="/'")
def test_a_password_is_refused_in_one_line_without_showing_it(
    secret: str, directory: str
) -> None:
    for dsn in (
        f"postgresql://valis:{quote(secret, safe='')}@/valis_state?host={quote(directory)}",
        f"postgresql://valis@/valis_state?host={quote(directory)}"
        f"&password={quote(secret, safe='')}",
        f"host='{_conninfo_quoted(directory)}' dbname=valis_state password='{secret}'",
    ):
        with pytest.raises(DsnRefused) as refused:
            check_operator_dsn(dsn, source="--dsn")
        message = str(refused.value)
        assert message.startswith("--dsn: DSN refused: it carries a password (password)")
        assert secret not in message
        assert "\n" not in message


def test_a_passfile_is_refused() -> None:
    with pytest.raises(DsnRefused, match=r"carries a password \(passfile\)"):
        check_operator_dsn(f"{EXAMPLE_DSN}&passfile=/root/.pgpass", source="test")


@given(host=tcp_hosts, port=st.integers(1, 65535))
def test_a_tcp_host_is_refused_however_it_is_given(host: str, port: int) -> None:
    for dsn in (
        f"postgresql://valis@{host}:{port}/valis_state",
        f"postgresql://valis@/valis_state?host={host}",
        f"host={host} dbname=valis_state",
        f"host=/var/run/postgresql,{host} dbname=valis_state",
    ):
        with pytest.raises(DsnRefused, match=re.escape(f"names the TCP host '{host}'")):
            check_operator_dsn(dsn, source="test")


@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        (f"{EXAMPLE_DSN}&hostaddr=192.0.2.5", "names the TCP address hostaddr=192.0.2.5"),
        ("hostaddr=::1 dbname=valis_state", "names the TCP address hostaddr=::1"),
        ("postgresql://valis@[2001:db8::5]/valis_state", "names the TCP host '2001:db8::5'"),
        ("service=prod", "names the service 'prod'"),
        ("postgresql://valis@/valis_state?host=/run/pg&port=x&bogus=1", "is malformed"),
        ("not a dsn", "is malformed"),
    ],
)
def test_tcp_addresses_services_and_garbage_are_refused(dsn: str, reason: str) -> None:
    with pytest.raises(DsnRefused, match=reason) as refused:
        check_operator_dsn(dsn, source="site facts")
    assert str(refused.value).startswith("site facts: ")
    assert EXAMPLE_DSN in str(refused.value)  # the remedy shows the seam's shape


def test_the_judge_reads_libpqs_keywords() -> None:
    assert dsn_problem({}) is None
    assert dsn_problem({"host": "/run/postgresql", "port": "5433"}) is None
    assert dsn_problem({"host": "db"}) is not None
    assert dsn_problem({"password": ""}) is not None
    assert issubclass(DsnRefused, ValisError)


def test_the_resident_refuses_a_tcp_or_password_dsn_from_its_environment_or_its_store(
    tmp_path: Path,
) -> None:
    facts = {
        "VALIS_NODE_NAME": "node-a",
        "VALIS_LOCATION": "here",
        "VALIS_SERVED_ZONES": "example.test.",
    }
    environ = {**facts, "VALIS_OPERATOR_STATE_DSN": "postgresql://valis:hunter2@/v?host=/run/pg"}
    with pytest.raises(DsnRefused, match="first boot: VALIS_OPERATOR_STATE_DSN in the env"):
        open_config_store(tmp_path, environ)
    assert not store_path(tmp_path).exists()

    store_path(tmp_path).parent.mkdir()
    store_path(tmp_path).write_text(
        render_site_facts({**facts, "VALIS_OPERATOR_STATE_DSN": "host=db.example"})
    )
    with pytest.raises(DsnRefused, match=r"names the TCP host 'db\.example'"):
        open_config_store(tmp_path, {**facts, "VALIS_OPERATOR_STATE_DSN": EXAMPLE_DSN})


absolute_paths = st.lists(st.from_regex(r"[A-Za-z0-9._-]{1,10}", fullmatch=True),
                          min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


def tls_dsn(server: str, port: int, files: tuple[str, str, str], **extra: str) -> str:
    query = {"sslmode": "verify-full", **dict(zip(CERTIFICATE_KEYS, files, strict=True)),
             **extra}
    return (f"postgresql://valis@{server}:{port}/valis_state?"
            + "&".join(f"{key}={quote(value, safe='/')}" for key, value in query.items()))


@given(host=tcp_hosts, port=st.integers(1, 65535),
       files=st.tuples(absolute_paths, absolute_paths, absolute_paths))
def test_a_certificate_dsn_passes_and_names_its_three_files(
    host: str, port: int, files: tuple[str, str, str]
) -> None:
    dsn = tls_dsn(host, port, files)
    assert check_operator_dsn(dsn, source="test") == dsn
    assert dsn_certificate_files(dsn, source="test") == CertificateFiles(*files)
    rendered = render_certificate_dsn(host, port, CertificateFiles(*files))
    assert dsn_certificate_files(rendered, source="test") == CertificateFiles(*files)
    assert database_host(parse_dsn(rendered, source="test")) == DatabaseHost(
        host, port, "valis", CertificateFiles(*files))


def test_the_example_certificate_dsn_passes_and_a_socket_dsn_names_no_files() -> None:
    assert check_operator_dsn(EXAMPLE_TLS_DSN, source="test") == EXAMPLE_TLS_DSN
    assert dsn_certificate_files(EXAMPLE_DSN, source="test") is None
    assert certificate_files({"host": "/run/postgresql"}) is None


@given(host=tcp_hosts, mode=st.sampled_from(
    ["disable", "allow", "prefer", "require", "verify-ca"]))
def test_tcp_without_verify_full_is_refused_naming_the_mode(host: str, mode: str) -> None:
    files = ("/s/ca.crt", "/s/client.crt", "/s/client.key")
    with pytest.raises(DsnRefused, match=f"names the TCP host '{re.escape(host)}' with "
                       f"sslmode={mode}; over TCP only sslmode=verify-full"):
        check_operator_dsn(tls_dsn(host, 5432, files, sslmode=mode), source="test")


@pytest.mark.parametrize("missing", CERTIFICATE_KEYS)
def test_tcp_without_one_of_the_certificate_files_is_refused_naming_it(missing: str) -> None:
    query = {"sslmode": "verify-full", "sslrootcert": "/s/ca.crt",
             "sslcert": "/s/client.crt", "sslkey": "/s/client.key"}
    del query[missing]
    dsn = "host=db.example dbname=valis_state " + " ".join(f"{k}={v}" for k, v in query.items())
    with pytest.raises(DsnRefused, match=f"names the TCP host 'db.example' without {missing}"):
        check_operator_dsn(dsn, source="test")


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"sslkey": "client.key"}, "sslkey='client.key', not an absolute path"),
        ({"sslpassword": "zqsecret"}, r"carries a password \(sslpassword\)"),
        ({"password": "zqsecret"}, r"carries a password \(password\)"),
        ({"host": "/run/postgresql,db.example"},
         "names the TCP host 'db.example' beside the socket directory '/run/postgresql'"),
    ],
)
def test_a_certificate_dsn_with_a_password_a_relative_file_or_a_socket_is_refused(
    extra: dict[str, str], reason: str
) -> None:
    files = ("/s/ca.crt", "/s/client.crt", "/s/client.key")
    dsn = tls_dsn("db.example", 5432, files, **extra)
    with pytest.raises(DsnRefused, match=reason) as refused:
        check_operator_dsn(dsn, source="test")
    assert "zqsecret" not in str(refused.value)


def test_a_tcp_address_with_the_certificate_shape_passes() -> None:
    dsn = (EXAMPLE_TLS_DSN + "&hostaddr=192.0.2.5")
    assert check_operator_dsn(dsn, source="test") == dsn
