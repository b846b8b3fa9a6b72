"""An operator chooses how a signed zone denies existence: ``valis zone sign --denial
nsec3`` records an NSEC3 chain's parameters in operator state at the node's fence
standing, run again with ``--denial compact`` it switches back, a salt that is not hex
is refused before anything is written, and a superseded node cannot switch. Listing a
secondary of a zone denying compactly warns that its transfers are refused."""

from __future__ import annotations

from pathlib import Path

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import PgCluster, valis
from tests.scenario.signing_node import ZONE, node_state  # noqa: F401 (the fixture)
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.operator_state.fence import claim_instance_fence
from valis_core.operator_state.zone_denial import zone_denials


def denials(pg_cluster: PgCluster, dsn: str) -> dict[str, Nsec3Params]:
    with pg_cluster.connect(dsn) as conn:
        return zone_denials(conn)


def test_sign_chooses_nsec3_and_switches_back_to_compact(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE)
    status, out, err = valis("zone", "sign", ZONE, "--state-dir", str(node_state))
    assert status == 0, err
    assert denials(pg_cluster, state_dsn) == {}  # compact unless asked

    status, out, err = valis("zone", "sign", ZONE, "--denial", "nsec3", "--nsec3-salt",
                             "AbCd", "--state-dir", str(node_state))
    assert status == 0, err
    assert "(kept); denial of existence: NSEC3 (iterations 0, salt abcd, no opt-out)" in out
    assert denials(pg_cluster, state_dsn) == {ZONE: Nsec3Params(0, b"\xab\xcd")}

    status, out, err = valis("zone", "sign", ZONE, "--state-dir", str(node_state))
    assert status == 0, err  # run again without --denial: the chain is kept
    assert denials(pg_cluster, state_dsn) == {ZONE: Nsec3Params(0, b"\xab\xcd")}

    status, out, err = valis("zone", "sign", ZONE, "--denial", "nsec3", "--nsec3-salt", "xyz",
                             "--state-dir", str(node_state))
    assert status != 0
    assert "--nsec3-salt 'xyz' is not hex" in err
    status, out, err = valis("zone", "sign", ZONE, "--denial", "nsec3",
                             "--nsec3-iterations", "500", "--state-dir", str(node_state))
    assert status != 0
    assert "outside 0..100" in err
    assert denials(pg_cluster, state_dsn) == {ZONE: Nsec3Params(0, b"\xab\xcd")}

    status, out, err = valis("zone", "sign", ZONE, "--denial", "compact",
                             "--state-dir", str(node_state))
    assert status == 0, err
    assert "denial of existence: compact (RFC 9824)" in out
    assert denials(pg_cluster, state_dsn) == {}


def test_a_superseded_node_cannot_switch_the_denial(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE)
    status, _, err = valis("zone", "sign", ZONE, "--state-dir", str(node_state))
    assert status == 0, err
    with pg_cluster.connect(state_dsn) as conn:
        claim_instance_fence(conn, 1, "node-a@elsewhere#fedcba9876543210")
    status, _, err = valis("zone", "sign", ZONE, "--denial", "nsec3",
                           "--state-dir", str(node_state))
    assert status != 0
    assert "superseded" in err
    assert denials(pg_cluster, state_dsn) == {}


def test_listing_a_secondary_of_a_compact_zone_warns_its_transfers_are_refused(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE)
    status, _, err = valis("zone", "sign", ZONE, "--state-dir", str(node_state))
    assert status == 0, err
    status, out, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE,
                             "192.0.2.53", "--key-name", "xfr")
    assert status == 0, err
    assert out.startswith(f"zone {ZONE}: secondary 192.0.2.53 added, key xfr.")
    assert (f"zone {ZONE} is signed with compact denial, which no secondary can serve" in err)
    assert f"valis zone sign {ZONE} --denial nsec3" in err
    status, _, err = valis("zone", "sign", ZONE, "--denial", "nsec3",
                           "--state-dir", str(node_state))
    assert status == 0, err
    status, _, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE,
                           "192.0.2.53", "--key-name", "xfr")
    assert (status, err) == (0, "")
