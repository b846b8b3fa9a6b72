"""A booted node's state directory for the signing verbs (``node_state``): store head,
configuration store serving ``ZONE``, instance token, all the run account's, the instance
holding the fence at generation 0 as ``HOLDER``."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.scenario.pg import RUN_USER, PgCluster
from valis_core.operator_state.fence import seed_instance_fence
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.store.manifest import Manifest, dumps

ZONE = "example.test."
TOKEN = "0123456789abcdef"
HOLDER = f"node-a@loopback#{TOKEN}"


@pytest.fixture
def node_state(pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path) -> Path:
    """A booted node's state directory (store head, configuration store, instance
    token), the run account's, whose instance holds the fence at generation 0."""
    account = pwd.getpwnam(RUN_USER)
    state = run_account_dir / "state"
    (state / "store").mkdir(parents=True, mode=0o700)
    (state / "config").mkdir(mode=0o700)
    (state / "store" / "manifest.json").write_bytes(dumps(Manifest(generation=0)))
    write_site_facts(state / "config" / "site-facts.env", {
        "VALIS_NODE_NAME": "node-a", "VALIS_LOCATION": "loopback",
        "VALIS_OPERATOR_STATE_DSN": state_dsn, "VALIS_SERVED_ZONES": ZONE,
    }, mode=0o600)
    (state / "instance").write_text(TOKEN + "\n")
    for path in (state, *state.rglob("*")):
        os.chown(path, account.pw_uid, account.pw_gid)
    state.chmod(0o700)
    with pg_cluster.connect(state_dsn) as conn:
        seed_instance_fence(conn, HOLDER)
    return state
