"""Where a node keeps things unless told otherwise: the paths and names the verbs, the
host assessment and the launcher agree on. Constants only, with no imports of weight, so
a command line can show them in its help without loading the code that uses them."""

from __future__ import annotations

from pathlib import Path

DEFAULT_STATE_DIR = "/var/lib/valis-dns"
DEFAULT_RUN_ACCOUNT = "valis"
DEFAULT_PG_SOCKET_DIR = "/var/run/postgresql"
DEFAULT_PG_PORT = 5432
DEFAULT_SITE_FACTS = "/etc/valis/site-facts.env"
"""The node's site-facts file, rendered by ``valis site-facts render`` at provisioning."""
DEFAULT_LAUNCHER_CONFIG = Path("/etc/fulcrum/launcher.toml")
