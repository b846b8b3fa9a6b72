"""Host assessment over an in-memory host: each broken prerequisite is reported, and only it."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.operator_state.dsn import CertificateFiles, DatabaseHost
from valis_core.operator_state.tls_material import issue_client, make_ca
from valis_core.ops.assessment import CLAUSE_NAMES, AssessConfig, render_table
from valis_core.ops.host_probe import Account, BpfOutcome, PathStat, SelfTestOutcome
from valis_core.ops.host_readiness import assess_host, development_listener_mentions

VALIS_UID = 998
BINARY = "/opt/valis/bin/valis"
LAUNCHER = "/etc/fulcrum/launcher.toml"
SITE_FACTS = "/etc/valis/site-facts.env"
UNIT = "/etc/systemd/system/valis.service"
PG_SOCKET = "/var/run/postgresql/.s.PGSQL.5432"

LAUNCHER_TEXT = """\
netns-name = "valis"
unit-ip = "198.51.100.10"
unit-cidr = 24
public-interface = "ens7"
public-gateway = "198.51.100.1"
mode = "dedicated"
designated-port = 53
catchall-object-path = "/opt/valis/lib/sk-lookup-catchall.bpf.o"
valis-command = ["/opt/valis/bin/valis"]
"""


def _dir(uid: int = 0, mode: int = 0o755) -> PathStat:
    return PathStat("dir", uid, uid, mode)


PASSING_SELF_TEST = SelfTestOutcome(0, "serving codec answered")
SK_LOOKUP_SUPPORTED = BpfOutcome(True, "libbpf's probe loaded one")


@attrs.frozen
class MemoryHost:
    """A host as plain data: the in-memory adapter of ``HostProbe``."""

    netns: bool = True
    sk_lookup: BpfOutcome = SK_LOOKUP_SUPPORTED
    objects: tuple[tuple[str, BpfOutcome], ...] = ()
    programs: frozenset[str] = frozenset({"ip", "nft", "setpriv"})
    accounts: tuple[Account, ...] = (Account("valis", VALIS_UID, VALIS_UID),)
    groups: tuple[tuple[str, int], ...] = (("valis", VALIS_UID),)
    stats: tuple[tuple[str, PathStat], ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    scripts: tuple[tuple[str, str], ...] = ()
    self_test_outcome: SelfTestOutcome = PASSING_SELF_TEST
    accepting: frozenset[str] = frozenset({PG_SOCKET})
    tcp_open: frozenset[tuple[str, int]] = frozenset()
    clock: datetime.datetime = datetime.datetime(2026, 12, 4, tzinfo=datetime.UTC)
    self_tests: list[tuple[str, ...]] = attrs.field(factory=list, eq=False)
    loads: list[str] = attrs.field(factory=list, eq=False)

    def network_namespaces_supported(self) -> bool:
        return self.netns

    def sk_lookup_supported(self) -> BpfOutcome:
        return self.sk_lookup

    def bpf_object_loads(self, path: str) -> BpfOutcome:
        self.loads.append(path)
        return dict(self.objects).get(path, BpfOutcome(False, "No such file or directory"))

    def find_program(self, name: str) -> str | None:
        return f"/usr/sbin/{name}" if name in self.programs else None

    def account(self, name: str) -> Account | None:
        return next((a for a in self.accounts if a.name == name), None)

    def group_id(self, name: str) -> int | None:
        return dict(self.groups).get(name)

    def stat(self, path: str) -> PathStat | None:
        return dict(self.stats).get(path)

    def resolve(self, path: str) -> str:
        return dict(self.links).get(path, path)

    def read_text(self, path: str) -> str | None:
        return dict(self.files).get(path)

    def interpreter(self, path: str) -> str | None:
        return dict(self.scripts).get(path)

    def self_test(self, command: tuple[str, ...]) -> SelfTestOutcome:
        self.self_tests.append(command)
        return self.self_test_outcome

    def unix_socket_accepts(self, path: str) -> bool:
        return path in self.accepting

    def tcp_accepts(self, host: str, port: int) -> bool:
        return (host, port) in self.tcp_open

    def now(self) -> datetime.datetime:
        return self.clock

    def with_stat(self, path: str, value: PathStat | None) -> MemoryHost:
        stats = {**dict(self.stats), path: value}
        return attrs.evolve(
            self, stats=tuple((k, v) for k, v in stats.items() if v is not None)
        )

    def with_file(self, path: str, text: str | None) -> MemoryHost:
        files = {**dict(self.files), path: text}
        return attrs.evolve(self, files=tuple((k, v) for k, v in files.items() if v is not None))


HEALTHY = MemoryHost(
    stats=(
        ("/", _dir()),
        ("/var", _dir()),
        ("/var/lib", _dir()),
        ("/var/lib/valis-dns", _dir(VALIS_UID, 0o700)),
        ("/opt", _dir()),
        ("/opt/valis", _dir()),
        ("/opt/valis/bin", _dir()),
        (BINARY, PathStat("file", 0, 0, 0o755)),
        ("/var/run", _dir()),
        ("/var/run/postgresql", PathStat("dir", 105, 105, 0o2775)),
        (PG_SOCKET, PathStat("socket", 105, 105, 0o777)),
        ("/etc", _dir()),
        ("/etc/fulcrum", _dir()),
        (LAUNCHER, PathStat("file", 0, 0, 0o644)),
        (SITE_FACTS, PathStat("file", 0, VALIS_UID, 0o640)),
        (UNIT, PathStat("file", 0, 0, 0o644)),
    ),
    files=(
        (LAUNCHER, LAUNCHER_TEXT),
        (SITE_FACTS, 'VALIS_NODE_NAME="a"\nVALIS_LOCATION="x"\n'),
        (UNIT, "[Service]\nType=notify\nEnvironmentFile=/etc/valis/site-facts.env\n"),
    ),
)

CONFIG = AssessConfig(
    run_account="valis:valis", binary=(BINARY,), environment_files=(SITE_FACTS, UNIT)
)
FROM_LAUNCHER = attrs.evolve(CONFIG, binary=None)

Defect = Callable[[MemoryHost], MemoryHost]

# For each clause, hosts that break that prerequisite and nothing else.
DEFECTS: dict[str, tuple[Defect, ...]] = {
    "network-namespaces": (
        lambda h: attrs.evolve(h, netns=False),
        lambda h: attrs.evolve(h, programs=h.programs - {"ip"}),
    ),
    "sk-lookup": (
        lambda h: attrs.evolve(h, sk_lookup=BpfOutcome(False, "the kernel refuses it")),
        lambda h: attrs.evolve(h, sk_lookup=BpfOutcome(None, "not root")),
    ),
    "nftables": (lambda h: attrs.evolve(h, programs=h.programs - {"nft"}),),
    "privilege-drop": (lambda h: attrs.evolve(h, programs=h.programs - {"setpriv"}),),
    "run-account": (lambda h: attrs.evolve(h, groups=()),),
    "state-directory": (
        lambda h: h.with_stat("/var/lib/valis-dns", _dir(0, 0o755)),
        lambda h: h.with_stat("/var/lib/valis-dns", None),
        lambda h: h.with_stat("/var/lib/valis-dns", _dir(VALIS_UID, 0o500)),
        lambda h: h.with_stat("/var/lib/valis-dns", PathStat("file", VALIS_UID, 0, 0o600)),
        lambda h: h.with_stat("/var/lib", _dir(0, 0o700)),
    ),
    "binary-traversable": (
        lambda h: h.with_stat("/opt/valis", _dir(0, 0o700)),
        lambda h: h.with_stat(BINARY, PathStat("file", 0, 0, 0o700)),
        lambda h: h.with_stat("/opt/valis/bin", PathStat("dir", 0, 0, 0o750)),
    ),
    "binary-serving-capable": (
        lambda h: attrs.evolve(
            h, self_test_outcome=SelfTestOutcome(1, "valis: serving codec not available")
        ),
        lambda h: attrs.evolve(h, self_test_outcome=SelfTestOutcome(None, "timed out")),
    ),
    "postgresql-socket": (
        lambda h: h.with_stat(PG_SOCKET, None),
        lambda h: attrs.evolve(h, accepting=frozenset()),
        lambda h: h.with_stat(PG_SOCKET, PathStat("file", 105, 105, 0o600)),
    ),
    "launcher-config": (
        lambda h: h.with_file(LAUNCHER, None).with_stat(LAUNCHER, None),
        lambda h: h.with_file(LAUNCHER, LAUNCHER_TEXT.replace("dedicated", "bridged")),
        lambda h: h.with_stat(LAUNCHER, PathStat("file", 0, 0, 0o666)),
        lambda h: h.with_stat(LAUNCHER, PathStat("file", VALIS_UID, 0, 0o644)),
    ),
    "no-development-listener": (
        lambda h: h.with_file(SITE_FACTS, 'VALIS_NODE_NAME="a"\nVALIS_REPL_PORT="4005"\n'),
        lambda h: h.with_file(UNIT, "[Service]\nEnvironment=VALIS_REPL_PORT=4005\n"),
    ),
}


def test_a_healthy_host_passes_every_clause_in_order() -> None:
    assessment = assess_host(HEALTHY, CONFIG)
    assert [clause.name for clause in assessment.clauses] == list(CLAUSE_NAMES)
    assert assessment.ok, render_table(assessment.failed)
    assert all(clause.remedy is None for clause in assessment.clauses)


@settings(max_examples=scaled(0.6))
@given(
    st.fixed_dictionaries(
        {},
        optional={
            name: st.integers(min_value=0, max_value=len(options) - 1)
            for name, options in DEFECTS.items()
        },
    )
)
def test_each_broken_clause_is_reported_and_nothing_else(chosen: dict[str, int]) -> None:
    host = HEALTHY
    for name, index in chosen.items():
        host = DEFECTS[name][index](host)
    assessment = assess_host(host, CONFIG)
    assert {clause.name for clause in assessment.failed} == set(chosen)
    assert assessment.ok == (not chosen)
    for clause in assessment.failed:
        assert clause.remedy, clause


def test_the_broken_host_of_the_proving_ground_fails_exactly_its_three_clauses() -> None:
    host = (
        HEALTHY.with_stat("/var/lib/valis-dns", _dir(0, 0o755))
        .with_stat("/opt/valis", _dir(0, 0o700))
        .with_file(LAUNCHER, None)
        .with_stat(LAUNCHER, None)
    )
    failed = assess_host(host, CONFIG).failed
    assert [clause.name for clause in failed] == [
        "state-directory",
        "binary-traversable",
        "launcher-config",
    ]
    assert "chown valis: /var/lib/valis-dns" in (failed[0].remedy or "")
    assert "/opt/valis" in failed[1].detail
    assert "fulcrum config produce" in (failed[2].remedy or "")


def test_the_binary_assessed_is_the_launcher_configs_command_when_none_is_given() -> None:
    host = attrs.evolve(HEALTHY, self_tests=[])
    assert assess_host(host, FROM_LAUNCHER).ok
    assert host.self_tests == [(BINARY, "selftest")]


def test_without_a_binary_or_a_usable_launcher_config_both_binary_clauses_fail() -> None:
    host = HEALTHY.with_file(LAUNCHER, "not toml = = =")
    failed = {clause.name for clause in assess_host(host, FROM_LAUNCHER).failed}
    assert failed == {"launcher-config", "binary-traversable", "binary-serving-capable"}


def test_an_explicit_binary_is_assessed_even_when_the_launcher_config_is_broken() -> None:
    host = HEALTHY.with_file(LAUNCHER, "not toml = = =")
    failed = {clause.name for clause in assess_host(host, CONFIG).failed}
    assert failed == {"launcher-config"}


def test_an_unsupervised_host_needs_no_launcher_config() -> None:
    host = HEALTHY.with_file(LAUNCHER, None).with_stat(LAUNCHER, None)
    config = attrs.evolve(CONFIG, supervised=False)
    assessment = assess_host(host, config)
    assert assessment.ok
    assert "not supervised" in assessment.clause("launcher-config").detail


def test_a_missing_run_account_fails_the_clauses_judged_for_it() -> None:
    host = attrs.evolve(HEALTHY, accounts=())
    failed = {clause.name for clause in assess_host(host, CONFIG).failed}
    assert failed == {"run-account", "state-directory", "binary-traversable"}


def test_root_is_refused_as_the_run_account() -> None:
    host = attrs.evolve(HEALTHY, accounts=(Account("valis", 0, 0),))
    clause = assess_host(host, CONFIG).clause("run-account")
    assert not clause.ok
    assert "root" in clause.detail


def test_a_named_run_group_that_does_not_exist_fails_the_run_account() -> None:
    config = attrs.evolve(CONFIG, run_account="valis:dns")
    clause = assess_host(HEALTHY, config).clause("run-account")
    assert not clause.ok
    assert "'dns'" in clause.detail


def test_a_launcher_config_pinning_another_uid_fails_the_run_account() -> None:
    host = HEALTHY.with_file(LAUNCHER, LAUNCHER_TEXT + "valis-uid = 4242\n")
    failed = assess_host(host, CONFIG).failed
    assert [clause.name for clause in failed] == ["run-account"]
    assert "valis-uid 4242" in failed[0].detail


def test_group_permission_lets_a_member_traverse() -> None:
    host = HEALTHY.with_stat("/opt/valis", PathStat("dir", 0, VALIS_UID, 0o750))
    assert assess_host(host, CONFIG).clause("binary-traversable").ok


def test_a_symlinked_binary_is_judged_on_its_target_chain_too() -> None:
    target = "/root/build/valis"
    host = (
        attrs.evolve(HEALTHY, links=((BINARY, target),))
        .with_stat("/root", _dir(0, 0o700))
        .with_stat("/root/build", _dir())
        .with_stat(target, PathStat("file", 0, 0, 0o755))
    )
    clause = assess_host(host, CONFIG).clause("binary-traversable")
    assert not clause.ok
    assert "/root " in clause.detail


def test_a_script_is_judged_on_its_interpreters_chain_too() -> None:
    venv_python = "/root/.venv/bin/python"
    host = (
        attrs.evolve(
            HEALTHY,
            scripts=((BINARY, venv_python),),
            links=((venv_python, "/usr/bin/python3.11"),),
        )
        .with_stat("/root", _dir(0, 0o700))
        .with_stat("/root/.venv", _dir())
        .with_stat("/root/.venv/bin", _dir())
        .with_stat(venv_python, PathStat("file", 0, 0, 0o755))
        .with_stat("/usr", _dir())
        .with_stat("/usr/bin", _dir())
        .with_stat("/usr/bin/python3.11", PathStat("file", 0, 0, 0o755))
    )
    failed = assess_host(host, CONFIG).failed
    assert [clause.name for clause in failed] == ["binary-traversable"]
    assert "cannot traverse /root " in failed[0].detail


def test_a_script_the_run_account_cannot_read_fails() -> None:
    host = (
        attrs.evolve(HEALTHY, scripts=((BINARY, "/usr/bin/python3"),))
        .with_stat(BINARY, PathStat("file", 0, 0, 0o711))
        .with_stat("/usr", _dir())
        .with_stat("/usr/bin", _dir())
        .with_stat("/usr/bin/python3", PathStat("file", 0, 0, 0o755))
    )
    clause = assess_host(host, CONFIG).clause("binary-traversable")
    assert not clause.ok
    assert "may not read the script" in clause.detail


def test_the_postgresql_clause_says_it_does_not_prove_authentication() -> None:
    clause = assess_host(HEALTHY, CONFIG).clause("postgresql-socket")
    assert clause.ok
    assert "does not prove the run account valis can authenticate" in clause.detail


def test_a_development_listener_is_named_with_its_file_and_line() -> None:
    host = HEALTHY.with_file(UNIT, "[Service]\nType=notify\nEnvironment=VALIS_REPL_PORT=1\n")
    clause = assess_host(host, CONFIG).clause("no-development-listener")
    assert not clause.ok
    assert f"{UNIT}:3" in clause.detail


def test_a_development_listener_in_the_launcher_command_is_found() -> None:
    text = LAUNCHER_TEXT.replace(
        'valis-command = ["/opt/valis/bin/valis"]',
        'valis-command = ["/usr/bin/env", "VALIS_REPL_PORT=4005", "/opt/valis/bin/valis"]',
    )
    host = HEALTHY.with_file(LAUNCHER, text)
    failed = {clause.name for clause in assess_host(host, CONFIG).failed}
    assert failed == {"no-development-listener"}


@given(st.lists(st.sampled_from(["# VALIS_REPL_PORT=1", "  ; VALIS_REPL_PORT", "A=1", ""])))
def test_commented_mentions_of_the_development_listener_do_not_count(lines: list[str]) -> None:
    assert development_listener_mentions("\n".join(lines)) == ()


def test_the_table_shows_each_failure_with_its_remedy() -> None:
    host = attrs.evolve(HEALTHY, programs=HEALTHY.programs - {"nft"})
    table = render_table(assess_host(host, CONFIG).clauses)
    lines = table.splitlines()
    failing = [i for i, line in enumerate(lines) if line.startswith("FAIL")]
    assert len(failing) == 1
    assert "nftables" in lines[failing[0]]
    assert "remedy: apt-get install nftables" in lines[failing[0] + 1]


def test_a_designated_port_the_firewall_drops_passes_with_a_warning_naming_it() -> None:
    dropped = LAUNCHER_TEXT.replace("designated-port = 53", "designated-port = 5353")
    assessment = assess_host(HEALTHY.with_file(LAUNCHER, dropped), CONFIG)
    assert assessment.ok
    clause = assessment.clause("launcher-config")
    assert [c.name for c in assessment.warnings] == ["launcher-config"]
    assert clause.warning is not None
    assert "designated-port 5353 is not in the firewall's accept set" in clause.warning
    table = render_table(assessment.clauses)
    assert "warn  launcher-config" in table
    assert f"warning: {clause.warning}" in table


def test_a_healthy_host_warns_of_nothing() -> None:
    assert assess_host(HEALTHY, CONFIG).warnings == ()


STEER_OBJECT = "/opt/valis/lib/sk-lookup-catchall.bpf.o"
EDGE_ELECTED = HEALTHY.with_file(LAUNCHER, LAUNCHER_TEXT + "edge-port = 443\n")


def test_with_an_edge_elected_the_steer_object_must_load() -> None:
    loadable = attrs.evolve(
        EDGE_ELECTED, objects=((STEER_OBJECT, BpfOutcome(True, "loaded")),), loads=[]
    )
    clause = assess_host(loadable, CONFIG).clause("sk-lookup")
    assert clause.ok
    assert f"the steer object {STEER_OBJECT} loads" in clause.detail
    assert loadable.loads == [STEER_OBJECT]

    missing = assess_host(EDGE_ELECTED, CONFIG)
    assert [clause.name for clause in missing.failed] == ["sk-lookup"]
    failed = missing.failed[0]
    assert f"steer object {STEER_OBJECT} (catchall-object-path) does not load" in failed.detail
    assert "No such file or directory" in failed.detail
    assert "lib/sk-lookup-catchall.bpf.o" in (failed.remedy or "")


def test_an_unprivileged_assessment_cannot_tell_whether_the_object_loads() -> None:
    host = attrs.evolve(EDGE_ELECTED, objects=((STEER_OBJECT, BpfOutcome(None, "EPERM")),))
    clause = assess_host(host, CONFIG).clause("sk-lookup")
    assert not clause.ok
    assert "cannot tell" in clause.detail
    assert "as root" in (clause.remedy or "")


def test_without_an_edge_the_steer_object_is_not_loaded() -> None:
    host = attrs.evolve(HEALTHY, loads=[])
    clause = assess_host(host, CONFIG).clause("sk-lookup")
    assert clause.ok
    assert "no edge-port is elected" in clause.detail
    assert host.loads == []


# -- a node whose operator state is on a database host (a certificate DSN) ---------------

TLS_DIR = "/var/lib/valis-dns/operator-state-tls"
TLS_FILES = CertificateFiles(f"{TLS_DIR}/ca.crt", f"{TLS_DIR}/client.crt",
                             f"{TLS_DIR}/client.key")
TLS_CONFIG = attrs.evolve(CONFIG, database_host=DatabaseHost("db.example", 5432, "valis",
                                                             TLS_FILES))
_NOW = HEALTHY.clock
_CA = make_ca("test", _NOW)
_CLIENT = issue_client(_CA, "valis", "origin-1", _NOW)


def _tls_host(client_pem: bytes = _CLIENT.cert_pem) -> MemoryHost:
    return (
        attrs.evolve(HEALTHY, accepting=frozenset(), tcp_open=frozenset({("db.example", 5432)}))
        .with_stat(PG_SOCKET, None)
        .with_file(TLS_FILES.root, _CA.cert_pem.decode())
        .with_file(TLS_FILES.cert, client_pem.decode())
        .with_stat(TLS_FILES.key, PathStat("file", VALIS_UID, VALIS_UID, 0o600))
    )


def test_a_node_on_a_database_host_passes_with_no_local_socket() -> None:
    assessment = assess_host(_tls_host(), TLS_CONFIG)
    assert assessment.ok, render_table(assessment.failed)
    assert "not used" in assessment.clause("postgresql-socket").detail
    tls = assessment.clause("postgresql-tls")
    assert "db.example port 5432 accepts TCP" in tls.detail
    assert tls.warning is None


def test_a_node_on_its_own_socket_does_not_use_the_tls_clause() -> None:
    clause = assess_host(HEALTHY, CONFIG).clause("postgresql-tls")
    assert clause.ok
    assert "not used" in clause.detail


@pytest.mark.parametrize(
    ("defect", "found"),
    [
        (lambda h: h.with_stat(TLS_FILES.key, None), "client.key is absent"),
        (lambda h: h.with_stat(TLS_FILES.key, PathStat("file", VALIS_UID, VALIS_UID, 0o640)),
         "mode 0600"),
        (lambda h: h.with_stat(TLS_FILES.key, PathStat("file", 0, 0, 0o600)), "valis's alone"),
        (lambda h: h.with_file(TLS_FILES.root, None), "ca.crt is absent"),
        (lambda h: h.with_file(TLS_FILES.cert, "not a certificate"), "not a PEM certificate"),
        (lambda h: h.with_file(TLS_FILES.cert, issue_client(
            _CA, "postgres", "x", _NOW).cert_pem.decode()), "issued for postgres, not the role"),
        (lambda h: attrs.evolve(h, clock=_NOW + datetime.timedelta(days=900)), "expired on"),
        (lambda h: attrs.evolve(h, tcp_open=frozenset()), "does not accept TCP"),
    ],
)
def test_each_defect_of_a_database_host_fails_the_tls_clause_alone(
    defect: Callable[[MemoryHost], MemoryHost], found: str
) -> None:
    assessment = assess_host(defect(_tls_host()), TLS_CONFIG)
    assert [clause.name for clause in assessment.failed] == ["postgresql-tls"]
    assert found in assessment.clause("postgresql-tls").detail
    assert assessment.clause("postgresql-tls").remedy


def test_a_client_certificate_near_its_end_passes_with_a_warning() -> None:
    host = attrs.evolve(_tls_host(), clock=_NOW + datetime.timedelta(days=810))
    clause = assess_host(host, TLS_CONFIG).clause("postgresql-tls")
    assert clause.ok
    assert clause.warning is not None
    assert "client.crt expires on" in clause.warning


def test_certificate_files_a_condense_restores_from_a_backup_set_are_not_missing() -> None:
    host = (_tls_host().with_stat(TLS_FILES.key, None).with_file(TLS_FILES.cert, None)
            .with_file(TLS_FILES.root, None))
    assert not assess_host(host, TLS_CONFIG).clause("postgresql-tls").ok
    restoring = attrs.evolve(TLS_CONFIG, restoring=frozenset(TLS_FILES.all))
    assert assess_host(host, restoring).clause("postgresql-tls").ok
    unreachable = attrs.evolve(host, tcp_open=frozenset())
    assert not assess_host(unreachable, restoring).clause("postgresql-tls").ok
