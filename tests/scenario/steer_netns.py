"""The sk_lookup steer between real network namespaces: ``pair`` joins a unit netns
(``UNIT4`` and ``UNIT6``, with ``OTHER4`` the steer does not serve) to a client netns
(``CLIENT4``, ``CLIENT6``) by a veth pair; ``attached`` holds the steer attached in a
unit netns for the block; ``steer_links`` is ``bpftool link``'s outside witness of the
sk_lookup links (those on one netns, by ``netns_inode``, when given)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulcrum.steer import Steer
from tests.conftest import require_root
from tests.scenario.proving_ground import (
    netns_names,
    run,
)

UNIT4 = "203.0.113.10"
OTHER4 = "203.0.113.11"
CLIENT4 = "203.0.113.100"
UNIT6 = "2001:db8::10"
CLIENT6 = "2001:db8::100"
EDGE = 443


@pytest.fixture
def pair() -> Iterator[tuple[str, str]]:
    """A unit netns and a client netns joined by a veth pair; (unit, client)."""
    require_root()
    tag = secrets.token_hex(3)
    unit, client = f"vl-stu-{tag}", f"vl-stc-{tag}"
    run(["ip", "netns", "add", unit])
    try:
        run(["ip", "netns", "add", client])
        for ns in (unit, client):
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "-n", unit, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
             "netns", client])
        for ns, addresses in ((unit, (UNIT4, OTHER4, UNIT6)), (client, (CLIENT4, CLIENT6))):
            for address in addresses:
                prefix = 64 if ":" in address else 24
                run(["ip", "-n", ns, "addr", "add", f"{address}/{prefix}", "dev", "eth0",
                     "nodad"] if ":" in address else
                    ["ip", "-n", ns, "addr", "add", f"{address}/{prefix}", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        yield unit, client
    finally:
        for ns in (unit, client):
            if ns in netns_names():
                run(["ip", "netns", "del", ns], check=False)


@contextlib.contextmanager
def netns_fd(name: str) -> Iterator[int]:
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def attached(obj: Path, unit: str, address: str | tuple[str, ...] = UNIT4,
             ports: frozenset[int] = frozenset({EDGE})) -> Iterator[Steer]:
    addresses = [ipaddress.ip_address(a) for a in
                 ((address,) if isinstance(address, str) else address)]
    with netns_fd(unit) as fd:
        steer = Steer.attach(str(obj), fd, addresses, ports)
    try:
        yield steer
    finally:
        steer.close()


def netns_inode(path: str) -> int:
    return os.stat(path).st_ino


def steer_links(inode: int | None = None) -> list[dict[str, Any]]:
    """``bpftool link``'s sk_lookup links, those on netns ``inode`` when given."""
    out = run(["bpftool", "-j", "link", "show"]).stdout
    links = [link for link in json.loads(out or "[]")
             if link.get("attach_type") == "sk_lookup"]
    if inode is not None:
        links = [link for link in links if link.get("netns_ino") == inode]
    return links
