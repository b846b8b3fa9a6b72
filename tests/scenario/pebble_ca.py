"""pebble, the ACME test CA, in a network namespace of its own beside the node's.

Two namespaces joined by one veth pair on 203.0.113.0/24: the node's (``NODE_IP``, where
the resident under test runs with its descriptors bound) and the CA's (``CA_IP``, where
pebble listens for ACME on 14000 and for management on 15000). pebble resolves through
the node: ``-dnsserver`` is the node's DNS, so a DNS-01 challenge is really validated
against what the node serves. ``PEBBLE_VA_ALWAYS_VALID`` is never set;
``PEBBLE_VA_NOSLEEP`` skips pebble's random validation delays, and nonce rejection and
authorization reuse are off so each run takes the same path.

pebble's HTTPS API is served with a certificate from a throwaway CA (``edge_ca``); the
node trusts it through ``REQUESTS_CA_BUNDLE``. pebble's own issuing root (for the leaves
it signs) is fetched from its management interface. Orders are counted from pebble's
log (one ``POST /order-plz`` line each).

``join`` instead of ``build`` puts the CA's namespace on an existing bridge (a proving
ground's "internet") at ``ca_ip``, resolving through a node at ``node_ip`` there.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import attrs

from tests.scenario.edge_ca import make_test_ca
from tests.scenario.proving_ground import PYTHON, run, run_in, wait_for

NODE_IP = "203.0.113.10"
CA_IP = "203.0.113.20"
PREFIX = 24
ACME_PORT = 14000
MANAGEMENT_PORT = 15000
START_TIMEOUT = 20.0

_FETCH = r"""
import ssl, sys, urllib.request
context = ssl.create_default_context(cafile=sys.argv[2])
with urllib.request.urlopen(sys.argv[1], context=context, timeout=10) as response:
    sys.stdout.write(response.read().decode())
"""

_PEER_CERT = r"""
import socket, ssl, sys
context = ssl.create_default_context(cafile=sys.argv[4])
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as raw:
    with context.wrap_socket(raw, server_hostname=sys.argv[3]) as tls:
        sys.stdout.write(tls.getpeercert(binary_form=True).hex())
"""


@attrs.define
class Pebble:
    """The two namespaces and the pebble process; ``start()`` stands them up."""

    workdir: Path
    tag: str = attrs.field(factory=lambda: secrets.token_hex(3))
    node_ip: str = NODE_IP
    ca_ip: str = CA_IP
    proc: subprocess.Popen[bytes] | None = None

    @property
    def node_netns(self) -> str:
        return f"vl-acn-{self.tag}"

    @property
    def ca_netns(self) -> str:
        return f"vl-acc-{self.tag}"

    @property
    def directory_url(self) -> str:
        return f"https://{self.ca_ip}:{ACME_PORT}/dir"

    @property
    def api_root(self) -> Path:
        """The root pebble's HTTPS API certificate chains to (for REQUESTS_CA_BUNDLE)."""
        return self.workdir / "pebble-api-root.pem"

    @property
    def log_path(self) -> Path:
        return self.workdir / "pebble.log"

    def build(self) -> None:
        node, ca = self.node_netns, self.ca_netns
        run(["ip", "netns", "add", node])
        run(["ip", "netns", "add", ca])
        for ns in (node, ca):
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "-n", node, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
             "netns", ca])
        for ns, address in ((node, NODE_IP), (ca, CA_IP)):
            run(["ip", "-n", ns, "addr", "add", f"{address}/{PREFIX}", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])

    def join(self, internet: str, bridge: str = "br0", prefix: int = PREFIX) -> None:
        """Make only the CA's namespace, its ``eth0`` at ``ca_ip`` on ``bridge`` in the
        namespace ``internet``."""
        ca = self.ca_netns
        run(["ip", "netns", "add", ca])
        run(["ip", "-n", ca, "link", "set", "lo", "up"])
        run(["ip", "-n", ca, "link", "add", "eth0", "type", "veth", "peer", "name",
             f"ca-{self.tag}", "netns", internet])
        run(["ip", "-n", internet, "link", "set", f"ca-{self.tag}", "master", bridge, "up"])
        run(["ip", "-n", ca, "addr", "add", f"{self.ca_ip}/{prefix}", "dev", "eth0"])
        run(["ip", "-n", ca, "link", "set", "eth0", "up"])

    def start(self, dns_port: int, validity: int | None = None) -> None:
        """Start pebble resolving through the node's DNS at ``node_ip``:``dns_port``,
        issuing certificates valid ``validity`` seconds (pebble's five years if ``None``)."""
        api_ca = make_test_ca()
        served = api_ca.issue(("pebble.test",), (self.ca_ip,))
        (self.workdir / "pebble-api.pem").write_bytes(served.chain_pem)
        (self.workdir / "pebble-api.key").write_bytes(served.key_pem)
        self.api_root.write_bytes(api_ca.root_pem)
        os.chmod(self.api_root, 0o644)
        config = {"pebble": {
            "listenAddress": f"{self.ca_ip}:{ACME_PORT}",
            "managementListenAddress": f"{self.ca_ip}:{MANAGEMENT_PORT}",
            "certificate": str(self.workdir / "pebble-api.pem"),
            "privateKey": str(self.workdir / "pebble-api.key"),
            "httpPort": 5002,
            "tlsPort": 5001,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": False,
            **({} if validity is None else {"certificateValidityPeriod": validity}),
        }}
        config_path = self.workdir / "pebble-config.json"
        config_path.write_text(json.dumps(config))
        env = {
            "PATH": "/usr/bin:/bin",
            "PEBBLE_VA_NOSLEEP": "1",
            "PEBBLE_WFE_NONCEREJECT": "0",
            "PEBBLE_AUTHZREUSE": "0",
        }
        with self.log_path.open("wb") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ca_netns, "pebble", "-config", str(config_path),
                 "-dnsserver", f"{self.node_ip}:{dns_port}"],
                env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )
        self.proc = proc
        wait_for(lambda: "Listening on" in self.log() or proc.poll() is not None,
                 START_TIMEOUT, "pebble to listen")
        assert proc.poll() is None, self.log()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def orders(self) -> int:
        """How many orders pebble has been asked for."""
        return sum("POST /order-plz" in line for line in self.log().splitlines())

    def fetch(self, path: str, port: int = MANAGEMENT_PORT) -> str:
        """A GET of pebble's management (or ACME) interface, from its namespace."""
        result = run_in(self.ca_netns, [PYTHON, "-c", _FETCH,
                                        f"https://{self.ca_ip}:{port}{path}", str(self.api_root)])
        return result.stdout

    def issuing_root(self) -> bytes:
        """The root of the leaves pebble signs."""
        return self.fetch("/roots/0").encode("ascii")

    def served_leaf(self, port: int, server_name: str, cafile: Path) -> bytes:
        """The DER leaf the node's TLS edge at ``node_ip``:``port`` presents for
        ``server_name``, verified against ``cafile``, asked from the CA's namespace."""
        result = run_in(self.ca_netns, [PYTHON, "-c", _PEER_CERT, self.node_ip, str(port),
                                        server_name, str(cafile)])
        return bytes.fromhex(result.stdout.strip())

    def stop_ca(self) -> None:
        """Stop pebble, leaving the namespaces: the CA is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self) -> None:
        self.stop_ca()
        for ns in (self.node_netns, self.ca_netns):
            run(["ip", "netns", "del", ns], check=False)
