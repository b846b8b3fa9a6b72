"""One location of a node on a proving ground of its own, as the evacuation scenarios stand
two up (``ADDRESS_A`` and ``ADDRESS_B``, sharing one operator-state database): a state
directory, ``fulcrum launch`` as its unit under ``ProcessUnitController`` (as on a host
without systemd), and the condense host that brings it up; every clause of ``valis
assess`` must pass for it (``assess_supervised``)."""

from __future__ import annotations

import pwd
import shlex
import stat
import sys
from pathlib import Path

from tests.scenario.pg import RUN_USER, PgCluster, connect_as, ensure_system_user
from tests.scenario.proving_ground import (
    FULCRUM,
    Ground,
    unit_config_text,
)
from tests.scenario.resident_harness import make_state_dir, resident_runtime, site_facts
from valis_core.apply.unit_control import ProcessUnitController
from valis_core.identity.custody import load_or_create_keyfile, public_key_hex
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.ops.assessment import AssessConfig
from valis_core.ops.condense_host import (
    LocalCondenseHost,
    ask_soa_in_netns,
    let_unit_notify,
)
from valis_core.ops.host_readiness import assess_host
from valis_core.ops.local_probe import LocalHostProbe

ZONE = "example.test."
ADDRESS_A = "198.51.100.10"
ADDRESS_B = "198.51.100.20"


def assess_supervised(state_dir: Path, config: Path, cluster: PgCluster) -> None:
    """Every clause of ``valis assess`` for a host run by fulcrum must pass."""
    assessment = assess_host(LocalHostProbe(), AssessConfig(
        state_dir=str(state_dir),
        run_account=RUN_USER,
        launcher_config=str(config),
        pg_socket_dir=str(cluster.cluster.socket_dir),
        pg_port=cluster.cluster.port,
    ))
    assert assessment.ok, assessment.failed


class Node:
    """One location of the node: a ground, a state directory, fulcrum as its unit."""

    def __init__(self, workdir: Path, ground: Ground, address: str, cluster: PgCluster, *,
                 dsn: str, location: str, zones: str = ZONE) -> None:
        account = ensure_system_user(RUN_USER)
        owner = (account.pw_uid, account.pw_gid)
        self.ground = ground
        self.address = address
        self.state_dir = make_state_dir(workdir)
        self.log = workdir / f"unit-{location}.log"
        self.config = config = workdir / f"launcher-{location}.toml"
        config.write_text(unit_config_text(ground, [resident_runtime()], unit_ip=address))
        config.chmod(0o644)
        self.facts = facts = site_facts(dsn, zones, VALIS_LOCATION=location)
        self.command = command = ["/bin/sh", "-c", 'exec "$@" >>"$UNIT_LOG" 2>&1', "sh",
                                  FULCRUM, "launch", "--config", str(config)]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "UNIT_LOG": str(self.log),
               "STATE_DIRECTORY": str(self.state_dir), **facts}
        self.unit = ProcessUnitController(command, env=env, cwd="/", stop_timeout=20.0)
        let_unit_notify(self.unit, owner)
        self.host = LocalCondenseHost(
            state_dir=self.state_dir,
            run_account=owner,
            connect=lambda: connect_as(RUN_USER, dsn, autocommit=True),
            unit=self.unit,
            holder=f"{facts['VALIS_NODE_NAME']}@{location}",
            dns_address=(address, 53),
            assess=lambda: assess_supervised(self.state_dir, config, cluster),
            facts=facts,
            ready_timeout=120.0,
            ask_soa=ask_soa_in_netns(ground.client),
        )

    def condense_evacuate(self, archive: Path, cluster: PgCluster
                          ) -> tuple[list[str], dict[str, str]]:
        """The operator's ``valis condense --from-backup ARCHIVE --evacuate`` that makes
        this node from another's backup set, and its environment (site facts written
        beside the state directory)."""
        facts_file = self.state_dir.parent / f"site-facts-{self.facts['VALIS_LOCATION']}.env"
        write_site_facts(facts_file, self.facts)
        argv = [
            str(Path(sys.executable).parent / "valis"), "condense",
            "--from-backup", str(archive), "--evacuate", "--site-facts", str(facts_file),
            "--state-dir", str(self.state_dir), "--unit-command", shlex.join(self.command),
            "--dns-address", f"{self.address}:53", "--ask-in-netns", self.ground.client,
            "--launcher-config", str(self.config), "--binary", resident_runtime(),
            "--pg-socket-dir", str(cluster.cluster.socket_dir),
            "--pg-port", str(cluster.cluster.port),
        ]  # fmt: skip
        return argv, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "UNIT_LOG": str(self.log)}

    def owner_key(self) -> str:
        return public_key_hex(load_or_create_keyfile(self.state_dir))

    def zone_keys(self) -> dict[str, bytes]:
        """The zone-signing key files, by name, each checked to be the run account's
        alone."""
        files = {}
        for path in (self.state_dir / "dnssec").iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
            assert pwd.getpwuid(path.stat().st_uid).pw_name == RUN_USER, path
            files[path.name] = path.read_bytes()
        return files
