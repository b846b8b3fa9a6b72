"""A node under a real systemd, as the systemd scenarios place it (see test_systemd_unit):
where ``valis provision`` leaves the launcher config, the site facts and the state
directory, where ``valis apply`` delivers the units (``DELIVERED``, under ``ROOT``), the
``Node`` (the container standing in for the host, and what the scenarios apply to it),
and its operator-state database with the example zone imported
(``exampleexample_operator_state``)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import attrs

from tests.scenario.operator_state_helpers import EXAMPLE_WWW, EXAMPLE_ZONE, import_zone
from tests.scenario.pg import PgCluster
from tests.scenario.proving_ground import UNIT_IP, Ground, dig
from tests.scenario.systemd_container import SystemdContainer
from valis_core.operator_state.schema import migrate

UNIT = "fulcrum-valis.service"
SOCKET_UNIT = "fulcrum-valis-control.socket"
ROOT = "/opt/valis"
DELIVERED = f"{ROOT}/current/lib/systemd/system"
LAUNCHER_CONFIG = "/etc/fulcrum/launcher.toml"
SITE_FACTS = "/etc/valis/site-facts.env"
STATE_DIRECTORY = "/var/lib/valis-dns"
UP_TIMEOUT = 90.0
APPLY_TIMEOUT = 240.0
SERVING = re.compile(r"serving example\.test\. on udp=\S+ tcp=\S+ at generation (\d+)")


@attrs.frozen
class Node:
    """The container standing in for the host, and what the scenarios apply to it."""

    box: SystemdContainer
    ground: Ground
    valis: str
    delivery: Path
    newer: Path
    broken: Path

    def apply(self, delivery: Path, *extra: str) -> tuple[int, str, str]:
        """``valis apply --delivery`` as root on the host, through systemd; its status,
        stdout and stderr."""
        done = self.box.run(self.valis, "apply", "--delivery", str(delivery), *extra,
                            check=False, timeout=APPLY_TIMEOUT)
        return done.returncode, done.stdout, done.stderr

    def unit(self, *props: str) -> dict[str, str]:
        return self.box.show(UNIT, *props)

    def resident(self) -> int:
        """The resident's pid (as the container numbers it): fulcrum's one child."""
        main = self.unit("MainPID")["MainPID"]
        children = self.box.run("sh", "-c", f"cat /proc/{main}/task/*/children").stdout.split()
        assert len(children) == 1, f"fulcrum {main} has children {children}"
        return int(children[0])

    def owner_key_digest(self) -> str:
        key = self.box.run("base64", "-w0", f"{STATE_DIRECTORY}/owner.key").stdout
        return hashlib.sha256(key.encode()).hexdigest()

    def assert_answers(self) -> None:
        """The zone answers authoritatively from the client, over UDP and TCP."""
        for tcp in (False, True):
            soa = dig(self.ground.client, UNIT_IP, EXAMPLE_ZONE, "SOA", tcp=tcp)
            assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
        www = dig(self.ground.client, UNIT_IP, f"www.{EXAMPLE_ZONE}", "A")
        assert [record.split()[4] for record in www.answer] == ["192.0.2.80"], www.raw

    def generation(self) -> int:
        status = self.unit("StatusText")["StatusText"]
        matched = SERVING.search(status)
        assert matched, status
        return int(matched.group(1))


def example_operator_state(pg_cluster: PgCluster) -> str:
    """A fresh operator-state database, migrated, the example zone imported; its DSN."""
    dsn = pg_cluster.new_database("systemd")
    with pg_cluster.connect(dsn) as conn:
        migrate(conn)
    import_zone(pg_cluster, dsn, EXAMPLE_ZONE, extra=EXAMPLE_WWW)
    return dsn
