"""An operator turns a zone's signing on from the node: ``valis zone sign`` makes the key
in the state directory (or with ``--split`` a KSK and a ZSK) and records it in operator
state at the node's fence standing, ``valis zone ds`` prints what the parent needs; a node
another instance has superseded cannot turn signing on, and a zone not in operator state
is refused by name. Rollovers begin, wait and end as their tables say."""

from __future__ import annotations

import pwd
import stat
from pathlib import Path

import attrs
import pytest

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import RUN_USER, PgCluster, valis
from tests.scenario.signing_node import HOLDER, ZONE, node_state  # noqa: F401 (the fixture)
from valis_core.dns import wire
from valis_core.dns.dnssec import ds_rdata
from valis_core.dns.dnssec.zone_keys import load_key_ring, load_zone_keys
from valis_core.fence import FencedOut, FenceState
from valis_core.operator_state.fence import claim_instance_fence
from valis_core.operator_state.zone_rollover import advance_rollovers
from valis_core.operator_state.zone_signing import signed_zones


def test_sign_makes_the_key_records_it_fenced_and_ds_prints_it(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE)
    status, out, err = valis("zone", "sign", ZONE, "--algorithm", "15",
                             "--state-dir", str(node_state))
    assert status == 0, err
    key = load_zone_keys(node_state)["example.test"]
    assert out == (f"zone {ZONE}: signed with algorithm 15, key tag {key.tag} (made); give "
                   f"the parent its DS: valis zone ds {ZONE}\n")
    (path,) = (node_state / "dnssec").iterdir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_uid == pwd.getpwnam(RUN_USER).pw_uid
    with pg_cluster.connect(state_dsn) as conn:
        row = signed_zones(conn)[ZONE]
        set_by = conn.execute("SELECT set_by FROM zone_signing").fetchone()
    assert (row.algorithm, row.key_tag) == (15, key.tag)
    assert set_by == (HOLDER,)

    # Run again, the key is kept (the parent's DS still holds).
    status, out, _ = valis("zone", "sign", ZONE, "--algorithm", "15",
                           "--state-dir", str(node_state))
    assert (status, "(kept)" in out) == (0, True)

    status, out, _ = valis("zone", "ds", ZONE, "--state-dir", str(node_state))
    ds_line, key_line = out.splitlines()
    digest = ds_rdata(wire.from_text(ZONE), key.dnskey)[4:].hex()
    assert ds_line == f"{ZONE} IN DS {key.tag} 15 2 {digest}"
    assert key_line.startswith(f"{ZONE} IN DNSKEY 257 3 15 ")


@pytest.mark.parametrize("split", [False, True])
def test_sign_again_without_algorithm_keeps_the_zones_algorithm_and_kind(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path, split: bool  # noqa: F811
) -> None:
    """A zone signed with algorithm 15 (a CSK, or a KSK and a ZSK), signed again to change
    only its timings or its denial, keeps its keys: the default algorithm is for a zone
    signed anew, not a change of the one it has. Naming another is refused."""
    import_zone(pg_cluster, state_dsn, ZONE)
    state = ["--state-dir", str(node_state)]
    kind = ["--split"] if split else []
    status, _, err = valis("zone", "sign", ZONE, "--algorithm", "15", *kind, *state)
    assert status == 0, err
    keys = {tag: key.dnskey for tag, key in load_key_ring(node_state)["example.test"].items()}
    status, out, err = valis("zone", "sign", ZONE, "--denial", "nsec3", "--dnskey-ttl", "600",
                             *state)
    assert status == 0, err
    assert f"zone {ZONE}: signed with algorithm 15, " in out
    assert "(kept); denial of existence: NSEC3" in out
    assert {tag: key.dnskey for tag, key in load_key_ring(node_state)["example.test"].items()
            } == keys
    with pg_cluster.connect(state_dsn) as conn:
        row = signed_zones(conn)[ZONE]
    assert (row.algorithm, row.timing.dnskey_ttl) == (15, 600)
    status, _, err = valis("zone", "sign", ZONE, "--algorithm", "13", *kind, *state)
    assert status != 0
    assert "already signs with algorithm 15" in err


def test_a_max_zone_ttl_below_the_zones_ttls_is_warned_naming_the_largest(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    """A roll's switched step waits max-zone-ttl for the old key's signatures to leave
    caches: given below a TTL the zone signs (here a TXT of 7200; the delegation's NS and
    glue of two days are the child's, unsigned), ``sign`` and ``rollover`` say so on
    stderr, naming the largest, and keep the value; one covering it is not questioned."""
    import_zone(pg_cluster, state_dsn, ZONE, extra=(
        "long 7200 IN TXT \"kept two hours\"\n"
        "child 172800 IN NS ns.child\nns.child 172800 IN A 192.0.2.7\n"
    ))
    state = ["--state-dir", str(node_state)]
    status, _, err = valis("zone", "sign", ZONE, "--max-zone-ttl", "600", *state)
    assert status == 0, err
    warning = (f"warning: max-zone-ttl 600 is below zone {ZONE}'s largest signed TTL, "
               f"7200 (long.{ZONE} TXT)")
    assert warning in err
    assert "give --max-zone-ttl 7200 or more" in err
    with pg_cluster.connect(state_dsn) as conn:
        assert signed_zones(conn)[ZONE].timing.max_zone_ttl == 600
    status, _, err = valis("zone", "sign", ZONE, "--max-zone-ttl", "7200", *state)
    assert status == 0, err
    assert "warning" not in err
    status, out, err = valis("zone", "rollover", ZONE, "--max-zone-ttl", "600", *state)
    assert status == 0, err
    assert warning in err
    assert "rolling from key tag" in out
    with pg_cluster.connect(state_dsn) as conn:
        roll = signed_zones(conn)[ZONE].rollover
    assert roll is not None
    assert roll.timing.max_zone_ttl == 600


def test_a_superseded_node_cannot_turn_signing_on(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE)
    with pg_cluster.connect(state_dsn) as conn:
        claim_instance_fence(conn, 1, "node-a@elsewhere#fedcba9876543210")
    status, _, err = valis("zone", "sign", ZONE, "--state-dir", str(node_state))
    assert status != 0
    assert "superseded" in err
    with pg_cluster.connect(state_dsn) as conn:
        assert signed_zones(conn) == {}
    assert load_zone_keys(node_state) == {}  # no key left that no zone signs with


def test_a_zone_not_in_operator_state_is_refused(node_state: Path) -> None:  # noqa: F811
    status, _, err = valis("zone", "sign", "absent.test.", "--state-dir", str(node_state))
    assert status != 0
    assert "zone absent.test. is not in the operator-state database; import it first" in err
    status, _, err = valis("zone", "ds", "absent.test.", "--state-dir", str(node_state))
    assert status != 0
    assert "zone absent.test. is not signed; 'valis zone sign absent.test.' signs it" in err


def test_a_rollover_waits_for_the_parent_and_refuses_what_its_step_does_not_allow(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    """The operator begins a roll: a new key is made, the parent is to hold both DS, and
    operator state keeps the step and the timings given. A second roll, a confirmation at
    a step that waits for time, and ``sign`` mid-roll are refused naming the step."""
    import_zone(pg_cluster, state_dsn, ZONE)
    state = ["--state-dir", str(node_state)]
    assert valis("zone", "sign", ZONE, *state)[0] == 0
    old = load_zone_keys(node_state)["example.test"].tag
    status, out, err = valis("zone", "rollover", ZONE, *state, "--ds-ttl", "600")
    assert status == 0, err
    assert f"rolling from key tag {old} to " in out
    with pg_cluster.connect(state_dsn) as conn:
        row = signed_zones(conn)[ZONE]
    assert row.rollover is not None
    assert (row.key_tag, row.rollover.old, row.rollover.step) == (old, old, "ds-submit")
    assert (row.timing.ds_ttl, row.rollover.timing.ds_ttl) == (600, 600)
    new = row.rollover.new
    assert {key.tag for key in load_key_ring(node_state)["example.test"].values()} == {old, new}

    status, out, err = valis("zone", "ds", ZONE, *state)
    assert [line.split()[3] for line in out.splitlines() if " IN DS " in line] == [
        str(old), str(new)
    ]
    assert "at step ds-submit" in err

    status, _, err = valis("zone", "rollover", ZONE, *state)
    assert status != 0
    assert f"already rolling from key tag {old} to {new}, at step ds-submit" in err
    assert len(load_key_ring(node_state)["example.test"]) == 2  # no third key left behind

    status, out, _ = valis("zone", "rollover", ZONE, *state, "--ds-published")
    assert (status, "rollover at step ds-propagating" in out) == (0, True)
    status, _, err = valis("zone", "rollover", ZONE, *state, "--ds-published")
    assert status != 0
    assert "at step ds-propagating, which waits for time, not for the parent" in err
    status, _, err = valis("zone", "sign", ZONE, *state)
    assert status != 0
    assert "its key changes only by that roll" in err


def test_a_superseded_node_cannot_begin_a_rollover(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE)
    assert valis("zone", "sign", ZONE, "--state-dir", str(node_state))[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        claim_instance_fence(conn, 1, "node-a@elsewhere#fedcba9876543210")
    status, _, err = valis("zone", "rollover", ZONE, "--state-dir", str(node_state))
    assert status != 0
    assert "superseded" in err
    assert len(load_key_ring(node_state)["example.test"]) == 1  # the new key is not kept


def test_the_fence_holder_moves_a_due_step_on_and_a_superseded_one_writes_nothing(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    """What the resident does each second, asked directly: a step whose time has not come
    stays; a due one moves on, its wait counted from the write; a writer another instance
    has superseded is refused and the roll stays as it was."""
    import_zone(pg_cluster, state_dsn, ZONE)
    state = ["--state-dir", str(node_state)]
    assert valis("zone", "sign", ZONE, *state)[0] == 0
    assert valis("zone", "rollover", ZONE, *state, "--ds-ttl", "60",
                 "--parent-propagation-delay", "0")[0] == 0
    assert valis("zone", "rollover", ZONE, *state, "--ds-published")[0] == 0
    standing = FenceState(generation=0, holder=HOLDER)
    with pg_cluster.connect(state_dsn) as conn:
        roll = signed_zones(conn)[ZONE].rollover
        assert roll is not None
        assert roll.step == "ds-propagating"
        assert advance_rollovers(conn, standing, [ZONE], roll.since + 59) == []
        later = roll.since + 61
        (moved,) = advance_rollovers(conn, standing, [ZONE], later)
        assert moved == (ZONE, roll, attrs.evolve(roll, step="published", since=later))
        claim_instance_fence(conn, 1, "node-a@elsewhere#fedcba9876543210")
        with pytest.raises(FencedOut):
            advance_rollovers(conn, standing, [ZONE], later + 10**6)
        assert signed_zones(conn)[ZONE].rollover == moved[2]


def test_a_split_zone_signs_with_two_keys_and_rolls_its_zsk_on_time_alone(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    """``sign --split`` makes a KSK and a ZSK and records both; ``ds`` prints the KSK's DS
    alone. ``rollover --zsk`` pre-publishes a new ZSK: the parent has nothing to do (``ds``
    prints the same, a confirmation is refused), and the fence holder's looks move it on
    and end it, the new key then the zone's ZSK. A zone signed with a CSK has no ZSK to
    roll alone."""
    import_zone(pg_cluster, state_dsn, ZONE)
    state = ["--state-dir", str(node_state)]
    status, out, err = valis("zone", "sign", ZONE, "--split", *state)
    assert status == 0, err
    flags = {tag: key.flags for tag, key in load_key_ring(node_state)["example.test"].items()}
    (ksk,) = [tag for tag, flag in flags.items() if flag == 257]
    (zsk,) = [tag for tag, flag in flags.items() if flag == 256]
    assert out.startswith(
        f"zone {ZONE}: signed with algorithm 13, KSK key tag {ksk} and ZSK key tag {zsk} (made)"
    )
    with pg_cluster.connect(state_dsn) as conn:
        row = signed_zones(conn)[ZONE]
    assert (row.key_tag, row.zsk_tag) == (ksk, zsk)
    status, ds, _ = valis("zone", "ds", ZONE, *state)
    assert [line.split()[3:5] for line in ds.splitlines()] == [[str(ksk), "13"], ["257", "3"]]

    status, out, err = valis("zone", "rollover", ZONE, "--zsk", *state, "--dnskey-ttl", "60",
                             "--max-zone-ttl", "120", "--propagation-delay", "0")
    assert status == 0, err
    assert f"rolling its ZSK from key tag {zsk} to " in out
    with pg_cluster.connect(state_dsn) as conn:
        roll = signed_zones(conn)[ZONE].rollover
    assert roll is not None
    assert (roll.kind, roll.old, roll.step) == ("zsk", zsk, "zsk-published")
    assert load_key_ring(node_state)["example.test"][roll.new].flags == 256
    status, out, err = valis("zone", "ds", ZONE, *state)
    assert (status, out) == (0, ds)
    assert f"ZSK rollover from key tag {zsk} to {roll.new} at step zsk-published" in err
    status, _, err = valis("zone", "rollover", ZONE, *state, "--ds-published")
    assert status != 0
    assert "it ends on time, with nothing to confirm" in err

    # The DNSKEY TTL waited is the larger of the old (3600) and the new (60).
    assert (roll.timing.dnskey_ttl, roll.timing.max_zone_ttl) == (3600, 120)
    standing = FenceState(generation=0, holder=HOLDER)
    with pg_cluster.connect(state_dsn) as conn:
        assert advance_rollovers(conn, standing, [ZONE], roll.since + 3599) == []
        (moved,) = advance_rollovers(conn, standing, [ZONE], roll.since + 3601)
        switched = attrs.evolve(roll, step="zsk-switched", since=roll.since + 3601)
        assert moved == (ZONE, roll, switched)
        assert advance_rollovers(conn, standing, [ZONE], switched.since + 119) == []
        assert advance_rollovers(conn, standing, [ZONE], switched.since + 121) == [
            (ZONE, switched, None)
        ]
        row = signed_zones(conn)[ZONE]
    assert (row.key_tag, row.zsk_tag, row.rollover) == (ksk, roll.new, None)

    import_zone(pg_cluster, state_dsn, "csk.test.")
    assert valis("zone", "sign", "csk.test.", *state)[0] == 0
    status, _, err = valis("zone", "rollover", "csk.test.", "--zsk", *state)
    assert status != 0
    assert "no ZSK to roll alone; roll the CSK (without --zsk)" in err
    assert len(load_key_ring(node_state)["csk.test"]) == 1  # no key made for it
