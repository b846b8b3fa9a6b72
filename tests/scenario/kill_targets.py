"""What the kill trials' drivers call for the verbs that are library calls, with JSON
arguments: kept apart from ``kill_trials`` so a driver imports only the verb it runs
and is ready at once (the trials themselves import much more)."""

from __future__ import annotations

from pathlib import Path

from valis_core.identity.custody import load_or_create_keyfile
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.plugin.install import condense_modules
from valis_core.store.head import materialise_genesis
from valis_core.store.manifest import ModulePin

FACTS_OLD = {
    "VALIS_NODE_NAME": "origin-1",
    "VALIS_LOCATION": "here",
    "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/var/run/postgresql",
    "VALIS_SERVED_ZONES": "example.org.",
}
FACTS_NEW = {
    **FACTS_OLD,
    "VALIS_LOCATION": "there",
    "VALIS_SERVED_ZONES": ",".join(f"zone{n}.example." for n in range(200)),
}


def mint(args: list[str]) -> None:
    load_or_create_keyfile(Path(args[0]))


def write_facts(args: list[str]) -> None:
    write_site_facts(Path(args[0]), FACTS_NEW)


def genesis(args: list[str]) -> None:
    materialise_genesis(Path(args[0]))


def install(args: list[str]) -> None:
    state_dir, index_url, name, version, sha256 = args
    pins = [ModulePin(name=name, version=version, sha256=sha256)]
    condense_modules(Path(state_dir), pins, index_url)
