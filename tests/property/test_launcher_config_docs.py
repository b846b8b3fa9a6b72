"""The launcher config's documentation matches the reader: the example in
docs/examples/launcher.toml is one the project's own reader accepts, and the key table in
docs/fulcrum.md names exactly the keys the reader knows, marking the optional ones."""

from __future__ import annotations

import re
from pathlib import Path

from valis_core.launcher_config import FIELDS, OPTIONAL_FIELDS, parse_launcher_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
_ROW = re.compile(r"^\| `([a-z-]+)` \| (yes|no) \|", re.MULTILINE)


def documented_keys() -> dict[str, bool]:
    """The key table's rows: key -> whether the table says it is required."""
    text = (DOCS / "fulcrum.md").read_text("utf-8")
    section = text.split("## The launcher config", 1)[1].split("\n## ", 1)[0]
    return {key: required == "yes" for key, required in _ROW.findall(section)}


def test_the_example_launcher_config_is_one_the_reader_accepts() -> None:
    cfg = parse_launcher_config((DOCS / "examples" / "launcher.toml").read_text("utf-8"))
    assert cfg.designated_port == 53
    assert cfg.owner_port is not None


def test_the_key_table_lists_exactly_the_readers_keys_and_which_are_required() -> None:
    table = documented_keys()
    assert list(table) == list(FIELDS)
    assert {key for key, required in table.items() if not required} == OPTIONAL_FIELDS
