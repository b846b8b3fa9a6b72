"""Apply and remove the unit's firewall table inside its netns.

The rules themselves are ``fulcrum.ruleset``'s; this module only feeds a script to
``nft -f -`` with its network namespace switched by ``nsenter --net`` (the mount
namespace is left alone, unlike ``ip netns exec``), bounded in time.
"""

from __future__ import annotations

import subprocess

from fulcrum.errors import LauncherError
from fulcrum.netns import netns_path
from fulcrum.ruleset import DEFAULT_TABLE, render_removal, render_ruleset

NFT_TIMEOUT = 15.0


def apply_ruleset(
    netns_name: str, accept: frozenset[tuple[str, int]], table: str = DEFAULT_TABLE
) -> None:
    """Replace the unit's firewall table atomically with one accepting ``accept``."""
    _nft(netns_name, render_ruleset(accept, table), f"applying firewall table inet {table}")


def remove_ruleset(netns_name: str, table: str = DEFAULT_TABLE) -> None:
    """Remove the unit's firewall table; a netns already gone has nothing to remove."""
    if not netns_path(netns_name).exists():
        return
    _nft(netns_name, render_removal(table), f"removing firewall table inet {table}")


def list_table(netns_name: str, table: str = DEFAULT_TABLE) -> str | None:
    """The table as ``nft list`` shows it, or ``None`` when the netns holds no such table."""
    result = _run(netns_name, ["list", "table", "inet", table], None, "listing")
    return result.stdout if result.returncode == 0 else None


def _nft(netns_name: str, script: str, what: str) -> None:
    result = _run(netns_name, ["-f", "-"], script, what)
    if result.returncode != 0:
        detail = " ".join(result.stderr.split())[:400] or f"exit status {result.returncode}"
        raise LauncherError(
            f"{what} in netns {netns_name} failed: {detail}; check that the netns exists, "
            "nftables is installed and the kernel has nf_tables"
        )


def _run(
    netns_name: str, nft_args: list[str], script: str | None, what: str
) -> subprocess.CompletedProcess[str]:
    argv = ["nsenter", f"--net={netns_path(netns_name)}", "nft", *nft_args]
    try:
        return subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=NFT_TIMEOUT,
            check=False,
        )
    except FileNotFoundError as exc:
        raise LauncherError(
            f"{what} in netns {netns_name}: {exc.filename} is not installed; install "
            "util-linux and nftables"
        ) from None
    except subprocess.TimeoutExpired:
        raise LauncherError(
            f"{what} in netns {netns_name}: nft did not finish within {NFT_TIMEOUT:g}s"
        ) from None
