"""The example node a provision is planned for: its launcher configuration (``CONFIG``)
and site facts (``FACTS``)."""

from __future__ import annotations

import ipaddress

from valis_core.launcher_config import LauncherConfig

CONFIG = LauncherConfig(
    netns_name="valis",
    unit_ip=ipaddress.ip_address("203.0.113.10"),
    unit_cidr=24,
    public_interface="ens7",
    public_gateway=ipaddress.ip_address("203.0.113.1"),
    mode="dedicated",
    designated_port=53,
    catchall_object_path="/opt/valis/lib/sk-lookup-catchall.bpf.o",
    valis_command=("/opt/valis/current/bin/valis",),
)
FACTS = {
    "VALIS_NODE_NAME": "origin-1",
    "VALIS_LOCATION": "lab",
    "VALIS_SERVED_ZONES": "example.test.",
    "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/var/run/postgresql",
}
