"""A zone goes beyond one machine: the operator lists its secondaries with their TSIG keys
(``valis zone secondary``), only those secondaries may transfer it (AXFR, signed), and
they are told of every committed change (NOTIFY) and follow it; a real NSD in its own
network namespace proves it."""

from __future__ import annotations

import base64
import json

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import PgCluster, run_as, runtime_bin

ZONE = "example.test."
SECRET = base64.b64encode(bytes(range(32))).decode()


def valis(*argv: str) -> tuple[int, str, str]:
    result = run_as("valis", [str(runtime_bin() / "valis"), *argv])
    return result.returncode, result.stdout, result.stderr


def test_an_operator_lists_adds_and_removes_secondaries_with_their_keys(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    status, _, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE, "192.0.2.53",
                           "--key-name", "xfr")
    assert status == 1
    assert err == f"valis: zone {ZONE} is not in the operator-state database; import it first\n"

    import_zone(pg_cluster, state_dsn, ZONE)
    status, out, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE, "192.0.2.53",
                             "--key-name", "xfr", "--secret", SECRET)
    assert (status, err) == (0, "")
    assert out == f"zone {ZONE}: secondary 192.0.2.53 added, key xfr.\n"
    status, out, _ = valis("zone", "secondary", "add", "--dsn", state_dsn, "EXAMPLE.test",
                           "2001:db8::0:53", "--key-name", "Other.Key.")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"zone {ZONE}: secondary 2001:db8::53 added, key other.key."
    assert lines[1:3] == ['key "other.key." {', "\talgorithm hmac-sha256;"]

    status, out, _ = valis("zone", "secondary", "list", "--dsn", state_dsn, "--json",
                           "--secrets")
    assert status == 0
    listed = json.loads(out)
    assert [(s["address"], s["key_name"], s["algorithm"]) for s in listed] == [
        ("192.0.2.53", "xfr.", "hmac-sha256"), ("2001:db8::53", "other.key.", "hmac-sha256"),
    ]
    assert listed[0]["secret"] == SECRET
    assert len(base64.b64decode(listed[1]["secret"])) == 32

    for wrong, said in (
        (("not-an-address", "--key-name", "k"), "is not an IPv4 or IPv6 address"),
        (("192.0.2.0/24", "--key-name", "k"), "is not an IPv4 or IPv6 address"),
        (("192.0.2.9", "--key-name", "k", "--algorithm", "hmac-md5"), "hmac-sha256, "),
        (("192.0.2.9", "--key-name", "k", "--secret", "c2hvcnQ="), "the TSIG secret is 5 bytes"),
    ):
        status, out, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE, *wrong)
        assert (status, out) == (1, "")
        assert said in err
        assert len(err.splitlines()) == 1

    status, out, _ = valis("zone", "secondary", "remove", "--dsn", state_dsn, ZONE,
                           "192.0.2.53")
    assert (status, out) == (0, f"zone {ZONE}: secondary 192.0.2.53 removed\n")
    status, _, err = valis("zone", "secondary", "remove", "--dsn", state_dsn, ZONE,
                           "192.0.2.53")
    assert status == 1
    assert "has no secondary at 192.0.2.53" in err
    status, out, _ = valis("zone", "secondary", "list", "--dsn", state_dsn)
    assert out.splitlines() == [
        "ZONE\tADDRESS\tKEY\tALGORITHM", f"{ZONE}\t2001:db8::53\tother.key.\thmac-sha256",
    ]
