"""The configuration store: the node's site facts, copied from the environment once.

On the first boot (no store yet) the resident copies each site-facts value
(``valis_core.operator_state.site_facts.KNOWN_KEYS``) from its environment into
``config/site-facts.env`` under the state directory, atomically and mode 0600, refusing
a partial set with nothing written. From then on the store is what counts: the
environment is ignored, and a value there that differs from the store is reported (so an
operator who edits the unit's environment learns why nothing changed) but never applied.
The development listener (``VALIS_REPL_PORT``) is never copied. The operator-state DSN,
from the environment or the store, must name a socket under peer authentication
(``operator_state.dsn``): a TCP host or a password stops the boot here, before any
connection is tried.

The store's format is the site-facts environment file itself, so it is written and read
by the same render/parse pair as the first-boot file (one quoting, one validation). Its
header comment and the resident's log line say the same thing (``HOW_TO_CHANGE``): the
store is changed with ``valis site-facts set``, which updates the operator-state rows and
the store together, and a reload (SIGHUP) applies it to the running node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import attrs

from valis_core.operator_state.dsn import check_operator_dsn
from valis_core.operator_state.site_facts import (
    ACME_DIRECTORY_KEY,
    DSN_KEY,
    KNOWN_KEYS,
    SiteFactsError,
    check_site_facts,
    parse_site_facts,
    served_zones,
)
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.state_layout import CONFIG_FILE, config_store_path

#: How an operator changes the store: its header says it and the resident logs it.
HOW_TO_CHANGE = (
    "change it with `valis site-facts set NODE KEY=VALUE... --state-dir DIR`, then "
    "`systemctl reload fulcrum-valis` (SIGHUP)"
)
STORE_HEADER = f"# valis configuration store: the node's site facts; {HOW_TO_CHANGE}."
STORE_FILE = CONFIG_FILE
STORE_MODE = 0o600
DIR_MODE = 0o700


def _frozen(facts: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(facts))


@attrs.frozen
class ConfigStore:
    """The site facts the node runs with, where they are kept, and how the boot found
    them: ``first_boot`` when this boot copied them, ``ignored`` the environment keys
    whose values differ from the store."""

    path: Path
    facts: Mapping[str, str] = attrs.field(converter=_frozen)
    first_boot: bool
    ignored: tuple[str, ...] = ()

    @property
    def node_name(self) -> str:
        return self.facts["VALIS_NODE_NAME"]

    @property
    def location(self) -> str:
        return self.facts["VALIS_LOCATION"]

    @property
    def dsn(self) -> str:
        return self.facts["VALIS_OPERATOR_STATE_DSN"]

    @property
    def served_zones(self) -> tuple[str, ...]:
        return served_zones(self.facts)

    @property
    def served_domain(self) -> str | None:
        """The name the edge serves and holds a certificate for (``None``: no edge)."""
        return self.facts.get("VALIS_SERVED_DOMAIN")

    @property
    def acme_directory_url(self) -> str | None:
        """The ACME CA the edge's certificate comes from (no default)."""
        return self.facts.get(ACME_DIRECTORY_KEY)

    @property
    def obtains_certificate(self) -> bool:
        """Whether an elected edge obtains its certificate over ACME (the served domain
        and the CA named)."""
        return bool(self.served_domain and self.acme_directory_url)

    @property
    def log_level(self) -> str:
        return self.facts.get("VALIS_LOG_LEVEL", "info")

    @property
    def log_format(self) -> str:
        return self.facts.get("VALIS_LOG_FORMAT", "text")

    @property
    def edge_on_demand(self) -> bool:
        """Whether an elected edge waits for its certificate instead of stopping the boot."""
        return self.facts.get("VALIS_EDGE_CERT", "required") == "on-demand"


def store_path(state_dir: Path) -> Path:
    return config_store_path(state_dir)


def facts_from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The site-facts values the environment carries (and nothing else of it)."""
    return {key: environ[key] for key in sorted(KNOWN_KEYS) if key in environ}


def differing_keys(stored: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, ...]:
    """Site-facts keys whose environment value is present and not the stored one."""
    offered = facts_from_environment(environ)
    return tuple(key for key, value in offered.items() if stored.get(key) != value)


def write_config_store(state_dir: Path, facts: Mapping[str, str]) -> Path:
    """Replace the store with ``facts`` (a complete set) atomically; the store's path.

    Written by root (the operator), the new file is handed to the owner of the store's
    directory (the run account), or the resident could no longer read it."""
    path = store_path(state_dir)
    write_site_facts(path, facts, mode=STORE_MODE, header=STORE_HEADER)
    if os.geteuid() == 0:
        owner = path.parent.stat()
        os.chown(path, owner.st_uid, owner.st_gid)
    return path


def read_config_store(state_dir: Path) -> ConfigStore:
    """The store as it is now (a reload's read); refuses a missing or damaged one."""
    path = store_path(state_dir)
    if not path.exists():
        raise SiteFactsError(f"configuration store {path} is missing; restore it from the "
                             "backup set")
    return open_config_store(state_dir, {})


def open_config_store(state_dir: Path, environ: Mapping[str, str]) -> ConfigStore:
    """Read the store, or on the first boot create it from ``environ``."""
    path = store_path(state_dir)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return _first_boot(path, environ)
    except (OSError, UnicodeDecodeError) as exc:
        raise SiteFactsError(f"configuration store {path} cannot be read: {exc}") from exc
    try:
        facts = parse_site_facts(text)
    except SiteFactsError as exc:
        raise SiteFactsError(
            f"configuration store {path} is damaged ({exc}); restore it from the backup set"
        ) from exc
    check_operator_dsn(facts[DSN_KEY], source=f"configuration store {path}: {DSN_KEY}")
    return ConfigStore(
        path=path, facts=facts, first_boot=False, ignored=differing_keys(facts, environ)
    )


def _first_boot(path: Path, environ: Mapping[str, str]) -> ConfigStore:
    facts = facts_from_environment(environ)
    try:
        check_site_facts(facts)
    except SiteFactsError as exc:
        raise SiteFactsError(
            f"first boot: the environment does not carry the node's site facts ({exc}); "
            "stage the rendered site-facts file as the unit's EnvironmentFile"
        ) from exc
    check_operator_dsn(facts[DSN_KEY], source=f"first boot: {DSN_KEY} in the environment")
    try:
        path.parent.mkdir(mode=DIR_MODE, exist_ok=True)
    except OSError as exc:
        raise SiteFactsError(
            f"cannot create the configuration store {path.parent}: {exc.strerror or exc}"
        ) from exc
    write_site_facts(path, facts, mode=STORE_MODE, header=STORE_HEADER)
    return ConfigStore(path=path, facts=facts, first_boot=True)
