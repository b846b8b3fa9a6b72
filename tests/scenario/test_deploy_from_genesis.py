"""The proving ground's ``deploy_from_genesis``: a host provisioned as an operator would,
launched by ``fulcrum launch`` as systemd would, and questioned as the Internet would.

Provisioning: the run account ``valis``; a state directory rooted somewhere of the
test's choosing, owned by that account and named to the unit by ``STATE_DIRECTORY``
(as ``StateDirectory=`` does); the launcher config written by ``fulcrum config
produce``; a private PostgreSQL cluster reached by peer authentication, its schema
migrated and a zone imported with the ``valis`` CLI run as the account; the site facts in
fulcrum's environment. Then fulcrum runs until the resident says ``READY=1``, the node is
asked from the client namespace (and updated from there with ``nsupdate`` through the
owner port, signed with the key ``valis owner key`` derives), its resident is inspected
through ``/proc``, and a SIGTERM to fulcrum must leave the host as it was found.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

from tests.scenario.genesis_host import (
    OWNER_PORT,
    READY_TIMEOUT,
    SERIAL,
    ZONE,
    produce_launcher_config,
    provision_operator_state,
    provision_state_dir,
    resident_pid,
    workdir,  # noqa: F401  (the fixture, shared)
)
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import (
    UNIT_IP,
    DigAnswer,
    Fulcrum,
    Ground,
    NotifyListener,
    dig,
    fulcrum_environment,
    host_has_link,
    ip_json,
    listener_in_pid,
    netns_names,
    process_gone,
    run,
    run_in_pid,
    tcp_exchange,
    tcp_exchange_in_pid,
    udp_exchange,
    wait_for,
)
from tests.scenario.resident_harness import resident_runtime

OUTSIDE = "elsewhere.invalid."
ZERO_CAPS = "0000000000000000"


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def test_a_host_provisioned_from_genesis_serves_its_zone_locked_down_and_stops_clean(
    ground: Ground, workdir: Path, pg_cluster: PgCluster  # noqa: F811
) -> None:
    # -- provision ------------------------------------------------------------------------
    account = ensure_system_user(RUN_USER)
    valis = resident_runtime()
    state_dir = provision_state_dir(workdir)
    config = produce_launcher_config(ground, workdir, valis)
    dsn = provision_operator_state(pg_cluster, workdir, valis)
    notify_dir = workdir / "notify"
    notify_dir.mkdir()
    notify = NotifyListener(notify_dir)
    nic_index = ip_json(["link", "show", "dev", ground.nic])[0]["ifindex"]
    environment = fulcrum_environment(notify, state_dir, dsn, ZONE)

    # -- launch ---------------------------------------------------------------------------
    fulcrum = Fulcrum.start(config, environment, workdir)
    try:
        try:
            notify.wait_for("READY", "1", READY_TIMEOUT)
        except TimeoutError:
            fulcrum.stop()
            raise AssertionError(f"no READY=1 from the unit:\n{fulcrum.stderr}") from None
        pid = resident_pid(fulcrum)

        # -- the node, asked from outside ---------------------------------------------------
        for tcp in (False, True):
            soa = dig(ground.client, UNIT_IP, ZONE, "SOA", tcp=tcp)
            assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
            assert [line.split()[3] for line in soa.answer] == ["SOA"], soa.raw
            assert soa.answer[0].split()[6] == SERIAL, soa.raw
        outside = dig(ground.client, UNIT_IP, OUTSIDE, "SOA")
        assert outside.status == "REFUSED", outside.raw

        # -- an authenticated write from outside, through the owner port -------------------
        printed = run([valis, "owner", "key", "--state-dir", str(state_dir)])
        key_file = workdir / "owner.tsig"
        key_file.write_text(printed.stdout)
        key_file.chmod(0o600)
        script = (
            f"server {UNIT_IP} {OWNER_PORT}\nzone {ZONE}\n"
            f"update add added.{ZONE} 300 A 192.0.2.99\nsend\n"
        )
        updated = run(["ip", "netns", "exec", ground.client, "nsupdate", "-v", "-t", "10",
                       "-k", str(key_file)], input=script, check=False)
        assert updated.returncode == 0, updated.stderr

        def answered() -> DigAnswer | None:
            answer = dig(ground.client, UNIT_IP, f"added.{ZONE}", "A")
            return answer if answer.answer else None

        added = wait_for(answered, 10.0, "the update on the wire")
        assert added.authoritative, added.raw
        assert [line.split()[4] for line in added.answer] == ["192.0.2.99"], added.raw
        soa = dig(ground.client, UNIT_IP, ZONE, "SOA")
        assert int(soa.answer[0].split()[6]) > int(SERIAL), soa.raw

        with listener_in_pid(pid, 8080):
            assert tcp_exchange_in_pid(pid, UNIT_IP, 8080)["ok"], "the listener is up inside"
            from_client = tcp_exchange(ground.client, UNIT_IP, 8080, timeout=1.0)
            assert not from_client["ok"], "8080 is not in the accept set"

        # -- the resident, from /proc ---------------------------------------------------------
        status = proc_status(pid)
        assert status["Uid"].split() == [str(account.pw_uid)] * 4
        for caps in ("CapEff", "CapPrm", "CapBnd"):
            assert status[caps] == ZERO_CAPS, caps
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        assert run_in_pid(pid, ["nft", "list", "table", "inet", "fulcrum"]).returncode == 0

        # -- the genesis owner seed, where the state directory is rooted (bytes unread) -------
        seed = os.lstat(state_dir / "owner.key")
        assert stat.S_ISREG(seed.st_mode)
        assert stat.S_IMODE(seed.st_mode) == 0o600
        assert (seed.st_uid, seed.st_gid) == (account.pw_uid, account.pw_gid)

        # -- SIGTERM to fulcrum ---------------------------------------------------------------
        fulcrum.signal(signal.SIGTERM)
        assert fulcrum.wait() == 0, fulcrum.stderr
    finally:
        if fulcrum.process.poll() is None:
            fulcrum.stop()
        notify.close()

    wait_for(lambda: process_gone(pid), 10.0, "the resident to be reaped")
    assert ground.unit_netns not in netns_names()
    host_tables = run(["nft", "list", "tables"]).stdout
    assert "inet fulcrum" not in host_tables
    assert host_has_link(ground.nic), "the NIC did not come back to the host namespace"
    assert ip_json(["link", "show", "dev", ground.nic])[0]["ifindex"] == nic_index
    assert not udp_exchange(ground.client, UNIT_IP, 53, "anyone?", timeout=1.0)["ok"]
    assert not tcp_exchange(ground.client, UNIT_IP, 53, timeout=1.0)["ok"]
    log = fulcrum.stderr
    assert "genesis manifest written at generation 0" in log
    assert "minted at genesis" in log
    assert "resident stopped on SIGTERM" in log
    assert f"unit {ground.unit_netns} torn down" in log
