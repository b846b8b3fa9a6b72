"""Provision requests and host facts for the first boot's plan properties
(``test_provision_plan.py``, ``test_provision_names.py``), and a host with what would block
a step taken away (``unblocked``)."""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from tests.provision_example import CONFIG, FACTS
from valis_core.launcher_config import render_launcher_config
from valis_core.operator_state.site_facts import render_site_facts
from valis_core.ops.provision import (
    CONTROL_SOCKET_UNIT,
    AccountFacts,
    ClusterFacts,
    FileFacts,
    HostFacts,
    ProvisionRequest,
    RemoteDatabase,
    UnitFacts,
)

REMOTE = RemoteDatabase("db.example", 5432, {"ca.crt": b"CA", "client.crt": b"CERT",
                                              "client.key": b"KEY"})
VERSION = "0.1.0"
SERVICE = "fulcrum-valis.service"
UNIT_DIR = "/opt/valis/current/lib/systemd/system/"

requests = st.builds(
    ProvisionRequest,
    account=st.sampled_from(["valis", "alice"]),
    run_group=st.sampled_from(["valis", "staff"]),
    version=st.just(VERSION),
    root=st.just("/opt/valis"),
    state_dir=st.just("/var/lib/valis-dns"),
    socket_dir=st.just("/var/run/postgresql"),
    launcher_config_path=st.just("/etc/fulcrum/launcher.toml"),
    launcher_config=st.just(CONFIG),
    site_facts_path=st.just("/etc/valis/site-facts.env"),
    site_facts=st.just(FACTS),
    unit_name=st.just(SERVICE),
    delivery=st.sampled_from([None, "/root/valis-serving-0.1.0.tar.gz"]),
    dist_url=st.sampled_from([None, "file:///srv/wheelhouse/simple/"]),
    database_host=st.sampled_from([None, REMOTE]),
)
modes = st.sampled_from([None, 0o755, 0o700, 0o750])
texts = st.sampled_from(["", "local all all peer\n", "other\n",
                         "local valis_state valis peer map=valis\nlocal all all peer\n",
                         "valis valis valis\n"])
accounts = st.one_of(st.none(), st.builds(
    AccountFacts, name=st.just("valis"), uid=st.sampled_from([0, 999, 1000]),
    gid=st.just(995), home=st.sampled_from(["/nonexistent", "/home/alice"]),
    shell=st.just("/usr/sbin/nologin"),
    home_blocked=st.sampled_from([None, "valis cannot traverse /home (mode 0700)"]),
))
clusters = st.one_of(st.none(), st.builds(
    ClusterFacts, version=st.just("15"), name=st.just("main"), port=st.just(5432),
    running=st.booleans(), role_exists=st.booleans(), database_exists=st.booleans(),
    ident_text=st.one_of(st.none(), texts), hba_text=st.one_of(st.none(), texts),
    schema_current=st.booleans(),
))


def files(good: str, mode: int) -> st.SearchStrategy[FileFacts | None]:
    return st.one_of(st.none(), st.builds(
        FileFacts, text=st.sampled_from([good, "stale\n"]), uid=st.sampled_from([0, 999]),
        mode=st.sampled_from([mode, 0o600, 0o666]),
    ))


def unit_facts(name: str) -> st.SearchStrategy[UnitFacts]:
    return st.builds(
        UnitFacts, name=st.just(name),
        link=st.sampled_from([None, UNIT_DIR + name, "/elsewhere/" + name]),
        enabled=st.booleans(),
        dropin=st.sampled_from([None, "[Service]\nUser=valis\n",
                                "[Socket]\nSocketUser=valis\n"]),
    )


held_units = st.tuples(st.one_of(st.none(), unit_facts(SERVICE)),
                       st.one_of(st.none(), unit_facts(CONTROL_SOCKET_UNIT))).map(
    lambda units: tuple(unit for unit in units if unit is not None))

host_facts = st.builds(
    HostFacts,
    account=accounts,
    root_mode=modes,
    versions_mode=modes,
    version_staged=st.booleans(),
    current=st.sampled_from([None, VERSION, "0.0.9"]),
    state_dir=st.one_of(st.none(), st.builds(FileFacts, text=st.just(""),
                                             uid=st.sampled_from([0, 999]), mode=modes.filter(
                                                 lambda m: m is not None))),
    cluster=clusters,
    launcher_config=files(render_launcher_config(CONFIG), 0o644),
    site_facts=files(render_site_facts(FACTS), 0o640),
    dist_registration=st.sampled_from([None, "file:///srv/wheelhouse/simple/",
                                       "https://old.example.net/simple/"]),
    systemd=st.booleans(),
    units=held_units,
    database_client=st.lists(st.tuples(
        st.sampled_from(sorted(REMOTE.files)),
        st.builds(FileFacts, text=st.sampled_from(["CA", "CERT", "KEY", "old"]),
                  uid=st.sampled_from([0, 999]), mode=st.sampled_from([0o600, 0o644]))),
        max_size=3, unique_by=lambda pair: pair[0]).map(tuple),
    remote_schema_current=st.booleans(),
)


def unblocked(request: ProvisionRequest, facts: HostFacts) -> tuple[ProvisionRequest, HostFacts]:
    """The same host with what would block a step taken away: the run account usable,
    a local cluster, systemd, this version's delivery at hand."""
    account = facts.account
    if account is not None:
        account = attrs.evolve(account, uid=account.uid or 999, home_blocked=None)
    elif not request.creates_account:
        account = AccountFacts(request.account, 1000, 1000, "/home/alice", "/bin/sh")
    facts = attrs.evolve(
        facts, account=account, systemd=True,
        cluster=facts.cluster or ClusterFacts("15", "main", 5432, False),
        current=None if facts.current not in (None, VERSION) else facts.current,
    )
    if request.delivery is None and not facts.version_staged:
        request = attrs.evolve(request, delivery="/root/valis-serving-0.1.0.tar.gz")
    return request, facts
