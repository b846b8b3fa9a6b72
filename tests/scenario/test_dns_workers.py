"""A node handed several UDP sockets on its DNS address (one ``SO_REUSEPORT`` group, as
fulcrum binds ``VALIS_DNS_WORKERS`` of them) serves every one: queries from many source
ports reach each worker, whose counters the metrics (label ``worker``) and the status
document name; the totals are the workers' sum."""

from __future__ import annotations

import contextlib
import re
import socket
from pathlib import Path

import dns.message
import dns.rcode

from tests.scenario.bounded_wait import until
from tests.scenario.resident_harness import Harness, make_state_dir, site_facts
from valis_cli.commands.status import render_status
from valis_core.dns.answer.fastpath import SERVING_SLICE_NS
from valis_core.resident.status_document import STATUS

ZONE = "example.test."
#: Distinct source ports asked from: with the kernel's 4-tuple hash over two sockets,
#: the chance that all of them land on one socket is 2 * 2^-64.
SOURCES = 64


def _ask_from_a_fresh_port(port: int) -> dns.message.Message:
    query = dns.message.make_query(ZONE, "SOA")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        sock.bind(("127.0.0.1", 0))
        sock.sendto(query.to_wire(), ("127.0.0.1", port))
        wire, _ = sock.recvfrom(65535)
    return dns.message.from_wire(wire)


def _worker_samples(body: str, family: str) -> dict[str, int]:
    found = re.findall(rf'^{family}{{worker="(\d+)"}} (\d+)$', body, re.MULTILINE)
    return {worker: int(value) for worker, value in found}


def test_a_node_with_two_workers_answers_on_both_sockets(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn), dns_workers=2)
    resident.wait_ready()
    assert resident.port is not None
    for _ in range(SOURCES):
        assert _ask_from_a_fresh_port(resident.port).rcode() == dns.rcode.NOERROR

    # The trio thread takes a worker's counts from its pump (every WORKER_COUNTS_S), so
    # the last answers are counted a moment after they went.
    until(lambda: sum(resident.status()["dns"]["workers"][n]["answered"]
                      for n in (0, 1)) == SOURCES, "every answer counted")
    code, body = resident.fabric_get("/metrics")
    assert code == 200
    text = body.decode()
    answered = _worker_samples(text, "valis_dns_worker_answered_total")
    assert set(answered) == {"0", "1"}, text
    assert all(count > 0 for count in answered.values()), answered
    assert sum(answered.values()) == SOURCES
    udp_total = sum(int(value) for value in re.findall(
        r'^valis_dns_responses_total\{transport="udp",rcode="[A-Z]+"\} (\d+)$', text,
        re.MULTILINE))
    assert udp_total == SOURCES
    handed = _worker_samples(text, "valis_dns_worker_handed_to_python_total")
    assert set(handed) == {"0", "1"}

    document = resident.status()
    workers = document["dns"]["workers"]
    assert [row["worker"] for row in workers] == [0, 1]
    assert sum(row["answered"] for row in workers) == SOURCES
    shown = render_status(STATUS.structure(document), now=0.0)
    assert "worker 0: answered" in shown
    assert "worker 1: answered" in shown
    assert f"serving DNS on udp=127.0.0.1:{resident.port} (2 workers)" in resident.stderr()


def test_one_worker_serves_as_before(resident_harness: Harness, zone_dsn: str) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    assert resident.port is not None
    assert _ask_from_a_fresh_port(resident.port).rcode() == dns.rcode.NOERROR
    until(lambda: resident.status()["dns"]["workers"][0]["answered"] == 1,
          "worker 0 counted the answer")
    assert len(resident.status()["dns"]["workers"]) == 1
    assert "(1 worker)" in resident.stderr()


def _slices(pid: int) -> dict[str, int]:
    """Each thread's time slice (ns) by thread id, as the kernel's scheduler shows it."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that has ended
            match = re.search(r"^se\.slice\s*:\s*(\d+)$", (task / "sched").read_text(),
                              re.MULTILINE)
            if match:
                found[task.name] = int(match[1])
    return found


def test_every_thread_of_the_resident_runs_on_short_slices(
    resident_harness: Harness, zone_dsn: str
) -> None:
    """Under EEVDF the running thread keeps its core until its slice ends, so a worker
    woken by a datagram on the core of a busy trio thread would wait out the trio thread's
    slice: the resident asks for short slices before it starts a thread, and every thread
    (the workers too) inherits them. Unprivileged: the resident runs as its account."""
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn), dns_workers=2)
    resident.wait_ready()
    assert resident.port is not None
    for _ in range(SOURCES):  # both workers have served (the test above: the spread)
        assert _ask_from_a_fresh_port(resident.port).rcode() == dns.rcode.NOERROR
    until(lambda: sum(row["answered"] for row in resident.status()["dns"]["workers"])
          == SOURCES, "every answer counted")
    slices = _slices(resident.pid)  # setpriv execs the resident: its pid is the resident's
    assert len(slices) >= 3, slices  # the trio thread and the two workers at least
    assert set(slices.values()) == {SERVING_SLICE_NS}, slices
