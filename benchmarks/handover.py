"""Queries lost across an upgrade, a reload and a crash: valis beside NSD and Knot, under
a steady load from a client namespace (issue 28's targets).

The host is a real systemd (``tests/scenario/systemd_container``: the host's systemd as
PID 1 of private namespaces over a copy-on-write of its root) on a proving ground
(``tests/scenario/proving_ground``: a bridge "internet" and a client namespace at
198.51.100.100). In it, as the systemd scenarios place it (``tests/scenario/systemd_node``):

- valis: the shipped unit ``fulcrum-valis`` running the frozen build's delivery (``make
  dist``, cached between runs as the scenario tests cache it), the launcher config, the
  site facts and a private PostgreSQL holding the example zone; fulcrum claims the
  ground's NIC, the unit answers at 198.51.100.10;
- NSD and Knot: Debian's own units (``nsd.service``, ``knot.service``: their restart
  policies, Restart=always and Restart=on-abort) serving the same zone from
  198.51.100.20 and 198.51.100.30, a second NIC of the ground; one server process or
  one worker of each kind, as ``dns_qps`` runs them, and no response rate limiting.

For each server and event, one run of ``handover_load`` in the client namespace sends
``--udp-rate`` UDP and ``--tcp-rate`` TCP queries a second (a new connection each),
every query timestamped; ``--before`` seconds into it the event happens; once the server
answers again (and, after a kill, from a new process; after valis's reload, which
returns at once, once a new resident stands in or ``--settle`` seconds passed) the load
goes on ``--after`` seconds more and stops. The events:

- valis ``apply``: ``valis apply --delivery`` of a newer delivery (another version of
  the same bundle, numbered ``<version>+handover.N``); it returns once the new version
  serves (today: the unit restarted on it);
- valis ``apply-failing``: ``valis apply --delivery`` of a delivery whose resident
  exits before READY (the build without the serving codec, as the systemd scenarios
  use); it fails and the old version must go on serving (today: switched back and the
  unit restarted on it);
- valis ``restart``: ``systemctl restart fulcrum-valis`` (what ``apply`` does once the
  delivery is staged, today);
- valis ``reload``: ``systemctl reload fulcrum-valis``;
- valis ``kill``: SIGKILL of the resident (fulcrum's child), as a crash;
- NSD and Knot ``reload``: the zone's serial raised in its file, then ``nsd-control
  reload`` / ``knotc reload``; ``restart``: ``systemctl restart`` (what a package
  upgrade does); ``kill``: SIGKILL of every process of the unit (NSD's main and server
  processes; Knot's one), taken up by the unit's own restart policy.

Per event (``handover_report``): queries sent, UDP lost (no answer within ``--timeout``),
TCP answered, refused, reset and timed out, answers with an unexpected RCODE, latency
p50/p99/max over the window from ``--before`` before the event to the last query, the
longest time without an answer and when answers resumed after the event. Also the
generator's own ceiling (``--ceiling-rate`` UDP a second against NSD: what it managed to
send and how far behind schedule it fell). Results go to ``--json`` (default
build/bench/handover.json) and a table; ``--plot PNG`` draws latency around each event
(``handover_plot.py``); ``--from JSON`` reports (and plots) a document again.

Needs root (namespaces, the container, the run account). ``make bench-handover``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
from dns_qps import describe_environment, plot  # beside this script
from handover_load import read_trace
from handover_report import (
    EventReport,
    from_document,
    queries,
    report,
    table,
    timeline,
    to_document,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.scenario.frozen_build import (  # noqa: E402
    CACHE_ROOT,
    VERSION,
    Builds,
    cache_enabled,
    delivery_of,
)
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, EXAMPLE_ZONE, soa_zone  # noqa: E402
from tests.scenario.pg import RUN_USER, ensure_system_user, private_cluster  # noqa: E402
from tests.scenario.proving_ground import (  # noqa: E402
    UNIT_IP,
    Ground,
    dig,
    unit_config_text,
    wait_for,
)
from tests.scenario.proving_ground import sweep_stale as sweep_stale_grounds  # noqa: E402
from tests.scenario.systemd_container import Bind, SystemdContainer, sweep_stale  # noqa: E402
from tests.scenario.systemd_node import (  # noqa: E402
    APPLY_TIMEOUT,
    DELIVERED,
    LAUNCHER_CONFIG,
    SITE_FACTS,
    SOCKET_UNIT,
    UNIT,
    UP_TIMEOUT,
    Node,
    example_operator_state,
)
from tests.scenario.systemd_node import ROOT as OPT_VALIS  # noqa: E402

from valis_core.atomic import write_atomic  # noqa: E402
from valis_core.operator_state.site_facts import render_site_facts  # noqa: E402

DEFAULT_JSON = ROOT / "build" / "bench" / "handover.json"
LOAD = Path(__file__).with_name("handover_load.py")
NSD_IP = "198.51.100.20"
KNOT_IP = "198.51.100.30"
RECOVER_TIMEOUT = 180.0
"""Seconds a server may take to answer again after an event before the run fails."""
MAX_RUN = 600.0
"""Seconds one load run lasts at most, whatever happens."""
EVENTS = {"valis": ("apply", "apply-failing", "restart", "reload", "kill"),
          "nsd": ("reload", "restart", "kill"), "knot": ("reload", "restart", "kill")}


def zone_text(serial: int) -> str:
    """The zone every server serves (the valis node's example zone), at ``serial``."""
    return soa_zone(EXAMPLE_ZONE, serial=serial, extra=EXAMPLE_WWW)


def answers(ground: Ground, address: str) -> int | None:
    """The SOA serial ``address`` answers the client with, authoritatively; None if no
    answer (one try, bounded)."""
    try:
        soa = dig(ground.client, address, EXAMPLE_ZONE, "SOA", timeout=1.0)
    except RuntimeError:
        return None
    if soa.status != "NOERROR" or not soa.authoritative or not soa.answer:
        return None
    return int(soa.answer[0].split()[6])


@attrs.define
class Target:
    """A server in the container: how each event is done to it, and when it is back."""

    name: str
    address: str
    box: SystemdContainer
    ground: Ground
    unit: str
    act: dict[str, Callable[[], None]]
    serial: int = 1
    main_pid: str = ""

    def pid_now(self) -> str:
        return self.box.show(self.unit, "MainPID")["MainPID"]

    def back(self, event: str, killed: str) -> bool:
        """Whether the server answers again after ``event`` (from a new process after a
        kill; ``killed`` is the process that was)."""
        if event == "kill":
            state = self.box.show(self.unit, "ActiveState", "MainPID")
            if state["ActiveState"] != "active" or state["MainPID"] in ("0", ""):
                return False
            if killed and self.process_after_kill() == killed:
                return False
        served = answers(self.ground, self.address)
        return served is not None and (event != "reload" or served == self.serial)

    def process_after_kill(self) -> str:
        """What a kill's success is read from: the unit's main process (NSD, Knot); for
        valis the resident, fulcrum's child."""
        if self.name != "valis":
            return self.pid_now()
        main = self.pid_now()
        children = self.box.run("sh", "-c", f"cat /proc/{main}/task/*/children",
                                check=False).stdout.split()
        return children[0] if len(children) == 1 else ""


def valis_target(node: Node, newer: Iterator[Path], failing: Iterator[Path]) -> Target:
    box = node.box

    def apply() -> None:
        status, _, err = node.apply(next(newer), "--timeout", str(UP_TIMEOUT))
        if status != 0:
            raise SystemExit(f"valis apply failed ({status}): {err}\n{box.journal(UNIT)}")

    def apply_failing() -> None:
        status, _, err = node.apply(next(failing), "--timeout", str(UP_TIMEOUT))
        if status == 0:
            raise SystemExit(f"valis apply of the failing delivery succeeded: {err}\n"
                             f"{box.journal(UNIT)}")

    target = Target("valis", UNIT_IP, box, node.ground, UNIT, {})

    def kill() -> None:
        resident = target.process_after_kill()
        target.main_pid = resident
        box.run("kill", "-KILL", resident)

    target.act.update({"apply": apply, "apply-failing": apply_failing,
                       "reload": lambda: box.systemctl("reload", UNIT),
                       "restart": lambda: box.systemctl("restart", UNIT,
                                                        timeout=UP_TIMEOUT),
                       "kill": kill})
    return target


def daemon_target(name: str, box: SystemdContainer, ground: Ground) -> Target:
    """NSD or Knot under Debian's unit, configured and started in the container."""
    address = NSD_IP if name == "nsd" else KNOT_IP
    unit = f"{name}.service"
    zone_path = f"/etc/{name}/example.test.zone"
    if name == "nsd":
        conf = f"""server:
    ip-address: {address}
    server-count: 1
    database: ""
    zonesdir: "/etc/nsd"
    hide-version: yes
    rrl-ratelimit: 0
    verbosity: 1
remote-control:
    control-enable: yes
    control-interface: /run/nsd/nsd.ctl
zone:
    name: {EXAMPLE_ZONE}
    zonefile: "{zone_path}"
"""
        reload_command = ["nsd-control", "reload"]
    else:
        conf = f"""server:
    rundir: "/run/knot"
    user: knot:knot
    listen: {address}@53
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "/var/lib/knot"
log:
  - target: syslog
    any: info
zone:
  - domain: {EXAMPLE_ZONE}
    file: "{zone_path}"
    journal-content: none
    zonefile-sync: -1
"""
        reload_command = ["knotc", "reload"]
    box.put_text(zone_path, zone_text(1), mode=0o644)
    box.put_text(f"/etc/{name}/{name}.conf", conf, mode=0o644)
    box.unmask(unit)
    box.systemctl("start", unit, timeout=UP_TIMEOUT)
    target = Target(name, address, box, ground, unit, {})

    def reload() -> None:
        target.serial += 1
        box.put_text(zone_path, zone_text(target.serial), mode=0o644)
        box.run(*reload_command)

    def kill() -> None:
        target.main_pid = target.pid_now()
        box.systemctl("kill", "--signal=KILL", unit)

    target.act.update({"reload": reload, "kill": kill,
                       "restart": lambda: box.systemctl("restart", unit,
                                                        timeout=UP_TIMEOUT)})
    return target


@attrs.frozen
class Measured:
    report: EventReport
    timeline: list[dict[str, Any]]
    load: dict[str, Any]


def run_event(target: Target, event: str, args: argparse.Namespace, work: Path,
              round_: int) -> Measured:
    """One load run with ``event`` done ``--before`` seconds into it."""
    out = work / f"{target.name}-{event}-{round_}.trace"
    load = start_load(target, args, out, (args.udp_rate, args.tcp_rate), MAX_RUN)
    try:
        time.sleep(args.before)
        target.main_pid = ""
        resident = target.process_after_kill() if target.name == "valis" else ""
        event_at = time.monotonic()
        target.act[event]()
        event_s = time.monotonic() - event_at
        if resident and event == "reload":
            replaced(target, resident, args.settle)
        wait_for(lambda: target.back(event, target.main_pid), RECOVER_TIMEOUT,
                 f"{target.name} to answer again after {event}", interval=0.1)
        time.sleep(args.after)
    finally:
        header = stop_load(load, out, args.timeout)
    trace = queries(header[1])
    measured = report(target.name, event, trace, event_at=event_at, event_s=event_s,
                      before=args.before, timeout=args.timeout, gap_threshold=args.gap,
                      round_=round_)
    span = max(q.sent for q in trace) - event_at
    line = timeline(trace, event_at=event_at, before=args.before, after=span,
                    bin_s=args.bin, timeout=args.timeout)
    return Measured(measured, line, header[0])


def replaced(target: Target, resident: str, settle: float) -> None:
    """After ``systemctl reload``, which returns at once: wait up to ``settle`` seconds
    for a new resident (a reload that hands over to one) to stand in for ``resident``,
    so that the handover falls inside the measured window. Today's reload keeps the
    resident: the whole wait passes, and so it is said."""
    try:
        wait_for(lambda: target.process_after_kill() not in ("", resident), settle,
                 "a new resident", interval=0.1)
    except TimeoutError:
        print(f"  the resident {resident} stayed through the reload ({settle:g} s)",
              file=sys.stderr, flush=True)
    else:
        print(f"  the resident {resident} was replaced", file=sys.stderr, flush=True)


def start_load(target: Target, args: argparse.Namespace, out: Path,
               rates: tuple[float, float], duration: float) -> subprocess.Popen[str]:
    """``handover_load`` in the client namespace at ``rates`` (UDP, TCP) against
    ``target``, once it says it is sending."""
    udp_rate, tcp_rate = rates
    command = ["ip", "netns", "exec", target.ground.client, sys.executable, str(LOAD),
               "--server", target.address, "--zone", EXAMPLE_ZONE,
               "--udp-rate", str(udp_rate), "--tcp-rate", str(tcp_rate),
               "--duration", str(duration), "--timeout", str(args.timeout),
               "--out", str(out), "--stdin-stop"]
    load = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert load.stdout is not None
    if load.stdout.readline().strip() != "sending":
        load.kill()
        raise SystemExit(f"the load generator did not start (exit {load.wait()})")
    return load


def stop_load(load: subprocess.Popen[str], out: Path, timeout: float
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    assert load.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        load.stdin.write("stop\n")
        load.stdin.close()
    try:
        status = load.wait(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        load.kill()
        load.wait()
        raise SystemExit("the load generator did not stop") from None
    if status != 0:
        raise SystemExit(f"the load generator failed (exit {status})")
    return read_trace(str(out))


def ceiling(target: Target, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The generator alone at ``--ceiling-rate`` UDP a second for three seconds: what it
    sent a second, how far behind its schedule it fell, its CPU."""
    out = work / "ceiling.trace"
    load = start_load(target, args, out, (args.ceiling_rate, 0), 3.0)
    header, columns = stop_load_when_done(load, out, args.timeout)
    sent = int(header["count"])
    answered = sum(o == 0 for o in columns["outcome"])
    return {"asked_rate": args.ceiling_rate, "sent_per_s": round(sent / header["sending_s"]),
            "answered_per_s": round(answered / header["sending_s"]),
            "behind_max_s": round(header["behind_max_s"], 4),
            "cpu_share": round(header["cpu_s"] / (header["sending_s"] + args.timeout), 3),
            "server": target.name}


def stop_load_when_done(load: subprocess.Popen[str], out: Path, timeout: float
                        ) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        status = load.wait(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        load.kill()
        load.wait()
        raise SystemExit("the load generator did not finish") from None
    if status != 0:
        raise SystemExit(f"the load generator failed (exit {status})")
    return read_trace(str(out))


@contextlib.contextmanager
def valis_node(work: Path, versions: int, failing: int
               ) -> Iterator[tuple[Node, list[Path], list[Path]]]:
    """The frozen build's delivery applied on a systemd host, ``versions`` newer
    deliveries of it to apply over it and ``failing`` deliveries of the build without
    the serving codec, whose resident exits before READY (the systemd scenarios'
    ``node``, ``applied``)."""
    ensure_system_user(RUN_USER)
    sweep_stale()
    sweep_stale_grounds()
    builds = Builds(work / "builds")
    (work / "builds").mkdir(mode=0o755)
    builds.launch(frozenset({"bundle", "delivery", "plain_build"} if failing
                            else {"bundle", "delivery"}))
    try:
        for step in ("build", "dist"):
            done = builds.result("frozen", step)
            if done.returncode != 0:
                raise SystemExit(f"make {step} failed:\n{done.stderr[-3000:]}")
        broken = []
        if failing:
            plain = builds.base("plain") / "plain" / "valis"
            if builds.result("plain", "build").returncode != 1 or not plain.is_dir():
                raise SystemExit("the build without the serving codec did not leave its "
                                 f"bundle at {plain}")
            broken = [delivery_of(plain, f"{VERSION}+handover.failing.{n}",
                                  work / "deliveries" / f"failing-{n}.tar.gz")
                      for n in range(1, failing + 1)]
        bundle = builds.base("frozen") / "frozen" / "valis"
        delivery = builds.base("frozen") / "dist" / "valis-serving.tar.gz"
        staged = work / "deliveries"
        newer = [delivery_of(bundle, f"{VERSION}+handover.{n}", staged / f"newer-{n}.tar.gz")
                 for n in range(1, versions + 1)]
        with private_cluster() as pg:
            dsn = example_operator_state(pg)
            ground = Ground().build()
            try:
                binds = [Bind(work), Bind(pg.cluster.socket_dir)]
                if cache_enabled():
                    binds.append(Bind(CACHE_ROOT))
                with SystemdContainer(binds=binds) as box:
                    box.adopt_link(ground.nic)
                    config = unit_config_text(ground, [f"{OPT_VALIS}/current/bin/valis"])
                    box.put_text(LAUNCHER_CONFIG, config, mode=0o644)
                    facts = {"VALIS_NODE_NAME": "node-a", "VALIS_LOCATION": "handover-bench",
                             "VALIS_OPERATOR_STATE_DSN": dsn,
                             "VALIS_SERVED_ZONES": EXAMPLE_ZONE}
                    box.put_text(SITE_FACTS, render_site_facts(facts), mode=0o644)
                    for unit in (UNIT, SOCKET_UNIT):
                        box.run("ln", "-s", f"{DELIVERED}/{unit}", f"/etc/systemd/system/{unit}")
                    box.systemctl("daemon-reload")
                    node = Node(box, ground, str(bundle / "valis"), delivery, delivery,
                                delivery)
                    status, _, err = node.apply(delivery, "--timeout", str(UP_TIMEOUT))
                    if status != 0:
                        raise SystemExit(f"the first valis apply failed: {err}\n"
                                         f"{box.journal(UNIT)}")
                    yield node, newer, broken
            finally:
                ground.cleanup()
    finally:
        builds.stop()


def second_nic(box: SystemdContainer, ground: Ground) -> None:
    """A NIC on the ground's bridge in the container's own namespace, holding NSD's and
    Knot's addresses."""
    nic = ground.add_nic("d")
    box.adopt_link(nic)
    for address in (NSD_IP, KNOT_IP):
        box.run("ip", "addr", "add", f"{address}/24", "dev", nic)
    box.run("ip", "link", "set", nic, "up")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="valis,nsd,knot")
    parser.add_argument("--events", default="apply,apply-failing,reload,restart,kill",
                        help="events to measure where the server has them (valis: apply, "
                        "apply-failing, restart, reload, kill; NSD and Knot: reload, "
                        "restart, kill)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times each event is measured, one after another (default 1)")
    parser.add_argument("--udp-rate", type=float, default=10_000)
    parser.add_argument("--tcp-rate", type=float, default=200)
    parser.add_argument("--timeout", type=float, default=2.0,
                        help="seconds a query waits for its answer before it is lost")
    parser.add_argument("--before", type=float, default=2.0,
                        help="seconds of load before the event (the window starts there)")
    parser.add_argument("--after", type=float, default=3.0,
                        help="seconds of load once the server answers again")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds to wait after valis's reload for a new resident "
                        "(a reload that hands over) before waiting --after")
    parser.add_argument("--gap", type=float, default=0.05,
                        help="seconds without an answer that count as a gap")
    parser.add_argument("--bin", type=float, default=0.05, help="timeline bin (seconds)")
    parser.add_argument("--ceiling-rate", type=float, default=60_000,
                        help="UDP q/s asked of the generator alone to find its ceiling "
                        "(0: skip)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--plot", type=Path, help="draw latency around each event here")
    parser.add_argument("--from", dest="source", type=Path, metavar="JSON",
                        help="measure nothing: report (and plot) a results document")
    args = parser.parse_args()
    if args.source is not None:
        document = json.loads(args.source.read_text())
        print(table(from_document(document)), end="")
        if args.plot is not None:
            plot(args.source, args.plot, drawer="handover_plot.py")
        return 0
    if os.geteuid() != 0:
        parser.error("run as root: namespaces, a systemd container and the run account")
    servers = [s for s in args.servers.split(",") if s]
    events = [e for e in args.events.split(",") if e]
    unknown = sorted(set(servers) - set(EVENTS))
    if unknown:
        parser.error(f"unknown servers: {', '.join(unknown)}")
    environment = describe_environment()
    measured: list[Measured] = []
    generator: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="valis-handover-", dir="/tmp"))
    work.chmod(0o755)
    valis = "valis" in servers
    applies = args.rounds if valis and "apply" in events else 0
    failing = args.rounds if valis and "apply-failing" in events else 0
    try:
        with valis_node(work, max(1, applies), failing) as (node, newer, broken):
            box = node.box
            second_nic(box, node.ground)
            versions = iter(newer)
            targets = {"valis": valis_target(node, versions, iter(broken))}
            for name in ("nsd", "knot"):
                if name in servers:
                    targets[name] = daemon_target(name, box, node.ground)
            for name in servers:
                box.wait_for(lambda n=name: answers(node.ground, targets[n].address),
                             UP_TIMEOUT, f"{name} to answer")
            if args.ceiling_rate > 0:
                generator = ceiling(targets.get("nsd", targets["valis"]), args, work)
                print(f"generator: asked {generator['asked_rate']:,.0f} UDP q/s, sent "
                      f"{generator['sent_per_s']:,} q/s, fell behind its schedule by "
                      f"{generator['behind_max_s'] * 1000:.0f} ms at most", flush=True)
            for round_ in range(1, args.rounds + 1):
                for name in servers:
                    for event in events:
                        if event not in EVENTS[name]:
                            continue
                        print(f"round {round_}: {name} {event} under load ...",
                              file=sys.stderr, flush=True)
                        measured.append(run_event(targets[name], event, args, work, round_))
                        print(table([measured[-1].report]), end="", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    environment["load_average_after"] = list(os.getloadavg())
    environment["generator"] = generator
    environment["loads"] = [m.load for m in measured]
    settings = {k: getattr(args, k) for k in ("rounds", "udp_rate", "tcp_rate", "timeout",
                                              "before", "after", "settle", "gap", "bin",
                                              "ceiling_rate")}
    settings["apply_timeout"] = APPLY_TIMEOUT
    document = to_document([m.report for m in measured], [m.timeline for m in measured],
                           settings, environment)
    print()
    print(table([m.report for m in measured]), end="")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.json, (json.dumps(document, indent=1) + "\n").encode())
    print(f"\nresults: {args.json}")
    if args.plot is not None:
        plot(args.json, args.plot, drawer="handover_plot.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
