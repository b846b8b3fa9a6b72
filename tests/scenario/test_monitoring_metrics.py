"""Every metric the shipped alerting rules and dashboard name (docs/examples) is one a live
node exports: a resident serving a zone it signs and whose key it rolls, with a listed
secondary and an elected edge holding its certificate (every family a rule or panel reads
then exists), read over its fabric's ``/metrics`` as Prometheus would read it (``promtool
check metrics`` parses and lints it)."""

from __future__ import annotations

import pwd
import subprocess

from tests.monitoring import (
    RULES,
    dashboard,
    dashboard_expressions,
    exported,
    metric_names,
    not_exported,
    promtool,
    rule_expressions,
)
from tests.scenario.bounded_wait import until
from tests.scenario.edge_ca import install, make_test_ca
from tests.scenario.pg import RUN_USER, PgCluster, valis
from tests.scenario.resident_harness import Harness, make_state_dir, site_facts
from tests.scenario.transfer_wire import KEY_NAME
from valis_core.operator_state.secondaries import Secondary, add_secondary

ZONE = "example.test."


def test_every_metric_a_rule_or_panel_names_is_one_the_node_exports(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, Secondary(ZONE, "127.0.0.1", KEY_NAME, "hmac-sha256", bytes(32)))
    state_dir = make_state_dir(resident_harness.workdir)
    account = pwd.getpwnam(RUN_USER)
    install(make_test_ca().issue(("example.test",)), state_dir,
            (account.pw_uid, account.pw_gid))
    resident = resident_harness.start(state_dir, site_facts(zone_dsn), edge=True)
    resident.wait_ready()
    for verb in ("sign", "rollover"):  # a roll under way: its step's families exist too
        status, _, err = valis("zone", verb, ZONE, "--state-dir", str(state_dir))
        assert status == 0, err

    def metrics() -> str:
        code, body = resident.fabric_get("/metrics")
        assert code == 200, body
        return body.decode()

    until(lambda: f'valis_dnssec_rollover_step{{zone="{ZONE}",step="ds-submit"}}' in metrics(),
          "the node to sign the zone it was told to sign, and to roll its key")
    text = metrics()
    families = exported(text)
    # Prometheus's own reading of the exposition: parsed, and clean of its lint.
    linted = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True,
                            text=True, timeout=60, check=False)
    assert linted.returncode == 0, linted.stdout + linted.stderr

    named = {
        f"rule {alert}": metric_names(expr)
        for alert, expr in rule_expressions(RULES.read_text()).items()
    }
    named.update({f"panel expression {expr!r}": metric_names(expr)
                  for expr in dashboard_expressions(dashboard())})
    unknown = {
        where: missing for where, names in named.items()
        if (missing := not_exported(names, families))
    }
    assert unknown == {}, f"named but not exported by the node: {unknown}"
    assert all(names for names in named.values())
