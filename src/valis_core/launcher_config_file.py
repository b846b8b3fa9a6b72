"""Producing and verifying the launcher config file on disk.

``produce_config`` writes the file atomically (mode 0644; root-owned when run as root,
as on the node) and then proves its own work by reading the file back through a fresh
parse. ``load_launcher_config`` is how anything reads the file: it refuses a missing
file with the path in the message, and a file other accounts could rewrite or that is
owned by anyone but root (or the account reading it), since what it names runs ahead of
the privilege drop (``launcher_config.config_file_problem``, the check assess makes).
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path

from valis_core.atomic import write_atomic
from valis_core.errors import ValisError
from valis_core.launcher_config import (
    FIELDS,
    LauncherConfig,
    LauncherConfigError,
    config_file_problem,
    config_file_remedy,
    launcher_config_from_mapping,
    parse_launcher_config,
    render_launcher_config,
)

CONFIG_MODE = 0o644
_INT_FIELDS = frozenset(
    {"unit-cidr", "designated-port", "edge-port", "owner-port", "valis-uid", "valis-gid"}
)


class ProvisioningError(ValisError):
    """The launcher config file cannot be written or read back."""


def config_from_options(options: Mapping[str, str | None]) -> LauncherConfig:
    """Build a config from command-line text, keyed by kebab-case field name.

    Integers are parsed here so a malformed one is reported against its field;
    ``valis-command`` is one string split the way a POSIX shell would (``shlex``).
    Options given as ``None`` are absent.
    """
    table: dict[str, object] = {}
    for key, text in options.items():
        if text is None:
            continue
        if key not in FIELDS:
            raise LauncherConfigError(f"unknown key {key}")
        if key in _INT_FIELDS:
            try:
                table[key] = int(text.strip(), 10)
            except ValueError as exc:
                raise LauncherConfigError(f"{text!r} is not an integer", key) from exc
        elif key == "valis-command":
            try:
                table[key] = shlex.split(text)
            except ValueError as exc:
                raise LauncherConfigError(f"cannot split {text!r}: {exc}", key) from exc
        else:
            table[key] = text
    return launcher_config_from_mapping(table)


def produce_config(cfg: LauncherConfig, out: Path) -> None:
    """Write ``cfg`` to ``out`` (0644, atomically), then read it back and compare."""
    try:
        if not out.parent.is_dir():
            out.parent.mkdir(mode=0o755)
        write_atomic(out, render_launcher_config(cfg).encode("utf-8"), mode=CONFIG_MODE)
    except OSError as exc:
        raise ProvisioningError(
            f"launcher config: cannot write {out}: {exc.strerror or exc} "
            "(run as root on the node, or give --out a writable path)"
        ) from exc
    again = load_launcher_config(out)
    if again != cfg:
        raise ProvisioningError(
            f"launcher config: {out} reads back differently from what was written; "
            "do not launch from it"
        )


def load_launcher_config(path: Path) -> LauncherConfig:
    """Read and validate the launcher config at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise ProvisioningError(
            f"launcher config: no file at {path}; produce one with `fulcrum config produce`"
        ) from exc
    except OSError as exc:
        raise ProvisioningError(
            f"launcher config: cannot open {path}: {exc.strerror or exc}"
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ProvisioningError(f"launcher config: {path} is not a regular file")
        problem = config_file_problem(
            str(path), info.st_uid, stat.S_IMODE(info.st_mode), reader_uid=os.geteuid()
        )
        if problem is not None:
            raise ProvisioningError(
                f"launcher config: {problem}; run `{config_file_remedy(str(path))}`"
            )
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ProvisioningError(
            f"launcher config: cannot read {path}: {exc.strerror or exc}"
        ) from exc
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProvisioningError(f"launcher config: {path} is not UTF-8 text") from exc
    try:
        return parse_launcher_config(text)
    except LauncherConfigError as exc:
        raise LauncherConfigError(exc.detail, exc.field, source=str(path)) from exc
