"""The systemd units the package ships (``packaging/systemd``), read as systemd reads
them: ``parse_unit`` gives section → key → every value given, ``only`` the one value a
key must have."""

from __future__ import annotations

from pathlib import Path

UNITS = Path(__file__).resolve().parents[1] / "packaging" / "systemd"
FULCRUM_UNIT = UNITS / "fulcrum-valis.service"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections → key → every value given (systemd allows a key more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"setting outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def only(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit[section][key]
    assert len(values) == 1, f"{key} given {len(values)} times"
    return values[0]
