"""Catalog zone consumers for the scenarios and the benchmark: Knot 3.2
(``catalog-role: interpret``) and BIND 9.18 (``catalog-zones``) in the secondary's
namespace of a ``Wire``, each configured as docs/catalog.md gives it, naming the catalog
and nothing of its members; how to ask them and read the catalog's serial they hold."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.scenario.proving_ground import dig
from tests.scenario.transfer_wire import KEY_NAME, NODE_IP, SECONDARY_IP, Wire, knot_head

CATALOG = "catalog.invalid."


def knot_catalog_conf(directory: Path, secret: str) -> str:
    """Knot consuming the catalog: the catalog zone itself, and the templates its members
    are given (the first by default, ``other`` for the members in group ``other``), as
    docs/catalog.md gives it."""
    member = f"""    master: primary
    acl: notify-from-primary
    storage: "{directory}"
"""
    templates = f"  - id: member\n{member}  - id: other\n{member}"
    return knot_head(directory, secret, templates=templates) + f"""zone:
  - domain: {CATALOG}
    master: primary
    acl: notify-from-primary
    catalog-role: interpret
    catalog-template: [member, other]
"""


def answers(wire: Wire, name: str, rdtype: str = "A") -> tuple[str, ...]:
    """The consumer's authoritative answer for ``name`` (nothing when it has no zone)."""
    try:
        found = dig(wire.secondary, SECONDARY_IP, name, rdtype)
    except RuntimeError:
        return ()
    return found.answer if found.status == "NOERROR" and "aa" in found.flags else ()


def gone(wire: Wire, name: str) -> bool:
    """Whether the consumer answers ``name``'s zone no more (REFUSED: not its zone)."""
    try:
        return dig(wire.secondary, SECONDARY_IP, name, "SOA").status == "REFUSED"
    except RuntimeError:
        return False


def bind_catalog_conf(
    directory: Path, secret: str, catalogs: tuple[str, ...] = (CATALOG,)
) -> str:
    """BIND 9.18 consuming ``catalogs`` (``catalog-zones``), as docs/catalog.md gives it."""
    primary = f"{NODE_IP} key \"{KEY_NAME}\""
    consumed = "".join(
        f"""        zone "{catalog}" default-primaries {{ {primary}; }}
            zone-directory "{directory}" in-memory no min-update-interval 1;
""" for catalog in catalogs)
    zones = "".join(f"""zone "{catalog}" {{
    type secondary;
    primaries {{ {primary}; }};
    file "{directory}/{catalog}db";
}};
""" for catalog in catalogs)
    return f"""options {{
    directory "{directory}";
    pid-file "{directory}/named.pid";
    session-keyfile "{directory}/session.key";
    managed-keys-directory "{directory}";
    listen-on port 53 {{ {SECONDARY_IP}; }};
    listen-on-v6 {{ none; }};
    recursion no;
    allow-new-zones yes;
    catalog-zones {{
{consumed}    }};
}};
controls {{ }};
key "{KEY_NAME}" {{
    algorithm hmac-sha256;
    secret "{secret}";
}};
{zones}"""


def knot_serial(wire: Wire, directory: Path) -> str:
    """The catalog's serial Knot holds (it answers no query for a catalog zone; its
    control socket says)."""
    out = subprocess.run(
        ["knotc", "-s", str(directory / "knot.sock"), "zone-status", CATALOG],
        capture_output=True, text=True, timeout=10, check=False,
    ).stdout
    found = re.search(r"serial: (\d+)", out)
    return found.group(1) if found else ""


def bind_serial(wire: Wire, directory: Path) -> str:
    """The catalog's serial BIND serves."""
    found = answers(wire, CATALOG, "SOA")
    return found[0].split()[6] if found else ""


CONSUMERS = {
    "knot": (knot_catalog_conf, ["knotd", "-c"], "knot.log", knot_serial),
    "bind": (bind_catalog_conf, ["named", "-g", "-c"], "bind.out", bind_serial),
}
"""Each consumer: its configuration, how it runs in the foreground, its log, and how to
read the catalog's serial it holds."""
