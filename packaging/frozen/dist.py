"""`make dist`: stage the bundle, the steer object and the units into the delivery tarball.

    python packaging/frozen/dist.py [--bundle build/valis] [--steer-object FILE] [--out FILE]

The tarball (default ``build/valis-serving-<version>.tar.gz``) is written by
``valis_core.apply.delivery.build_delivery``, the format ``valis apply --delivery``
consumes, so equal inputs give equal bytes. It holds, relative to the version directory
apply stages (``<root>/versions/<version>/``, reached as ``<root>/current/``):

- ``bin/valis``, ``bin/fulcrum`` and ``bin/_internal/``: the frozen bundle ``make build``
  produced, every file at its place (a link inside the bundle is delivered as a copy of
  the file it names: a delivery carries no links);
- ``lib/sk-lookup-catchall.bpf.o``: the sk_lookup steer object ``make build`` compiled
  beside the bundle (default ``<bundle>/../sk-lookup-catchall.bpf.o``), at the path the
  launcher config's ``catchall-object-path`` names (``<root>/current/lib/...``);
- ``lib/systemd/system/<unit>``: every unit under ``packaging/systemd``;
- ``share/doc/valis/``: the operator documentation (``docs/*.md``), which the unit's
  ``Documentation=`` names, and under ``examples/`` the monitoring it describes
  (``docs/monitoring.md``): the Grafana dashboard, the Prometheus alerting rules and
  their unit tests.

The version is the project's, from ``pyproject.toml``; a bundle frozen from another
version (its ``valis-<version>.dist-info`` says which) is refused. Per-host files (the
launcher config, site facts) are never part of a delivery.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from valis_core.apply.delivery import build_delivery  # noqa: E402
from valis_core.errors import ValisError  # noqa: E402

BIN = "bin"
STEER_OBJECT = "lib/sk-lookup-catchall.bpf.o"
UNITS = "lib/systemd/system"
UNIT_SUFFIXES = (".service", ".socket")
DOCS = "share/doc/valis"
MONITORING = ("valis-grafana-dashboard.json", "valis-alerts.yml", "valis-alerts.test.yml",
              "valis-alerts-expiry.test.yml")
"""The monitoring files of ``docs/examples``, delivered under ``share/doc/valis/examples``."""


class DistError(ValisError):
    """The bundle cannot be staged as it is."""


def project_version(pyproject: Path = REPO / "pyproject.toml") -> str:
    with open(pyproject, "rb") as handle:
        version: str = tomllib.load(handle)["project"]["version"]
    return version


def _mode(info: os.stat_result) -> int:
    return 0o755 if info.st_mode & 0o111 else 0o644


def bundle_files(bundle: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the bundle under ``bin/``; a link is followed, and must stay inside."""
    root = bundle.resolve()
    files: dict[str, tuple[bytes, int]] = {}
    for directory, subdirs, names in os.walk(root):
        for name in sorted(subdirs):
            if (Path(directory) / name).is_symlink():
                raise DistError(f"dist: {Path(directory) / name} is a directory link; "
                                "rebuild with `make build`")
        for name in names:
            path = Path(directory) / name
            target = path.resolve()
            if not target.is_relative_to(root) or not target.is_file():
                raise DistError(f"dist: {path} leads outside the bundle or to no file; "
                                "rebuild with `make build`")
            info = target.stat()
            if not stat.S_ISREG(info.st_mode):
                raise DistError(f"dist: {path} is not a regular file")
            relative = path.relative_to(root).as_posix()
            files[f"{BIN}/{relative}"] = (target.read_bytes(), _mode(info))
    return files


def unit_files(units: Path = REPO / "packaging" / "systemd") -> dict[str, tuple[bytes, int]]:
    return {
        f"{UNITS}/{path.name}": (path.read_bytes(), 0o644)
        for path in sorted(units.iterdir())
        if path.suffix in UNIT_SUFFIXES
    }


def steer_files(steer_object: Path) -> dict[str, tuple[bytes, int]]:
    """The compiled steer object at ``lib/``, where ``catchall-object-path`` names it."""
    if not steer_object.is_file():
        raise DistError(f"dist: {steer_object} does not exist; run `make build`, which "
                        "compiles the steer object beside the bundle")
    return {STEER_OBJECT: (steer_object.read_bytes(), 0o644)}


def doc_files(docs: Path = REPO / "docs") -> dict[str, tuple[bytes, int]]:
    files = {f"{DOCS}/{path.name}": (path.read_bytes(), 0o644)
             for path in sorted(docs.glob("*.md"))}
    for name in MONITORING:
        files[f"{DOCS}/examples/{name}"] = ((docs / "examples" / name).read_bytes(), 0o644)
    return files


def stage(bundle: Path, out: Path, version: str, steer_object: Path | None = None) -> int:
    """Write the delivery; the number of files it holds."""
    if not (bundle / "valis").is_file() or not (bundle / "fulcrum").is_file():
        raise DistError(f"dist: {bundle} holds no frozen valis and fulcrum; run `make build`")
    frozen_from = sorted(p.name for p in bundle.glob("*/valis-*.dist-info"))
    if frozen_from != [f"valis-{version}.dist-info"]:
        raise DistError(
            f"dist: {bundle} was frozen from {frozen_from or 'no valis metadata'}, not "
            f"valis {version}; run `make build` again"
        )
    steer = steer_object or bundle.parent / Path(STEER_OBJECT).name
    files = {**bundle_files(bundle), **steer_files(steer), **unit_files(), **doc_files()}
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest = build_delivery(files, version, out)
    return len(manifest.files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dist", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=REPO / "build" / "valis")
    parser.add_argument("--steer-object", type=Path,
                        help="default: sk-lookup-catchall.bpf.o beside the bundle")
    parser.add_argument("--out", type=Path, help="default: build/valis-serving-<version>.tar.gz")
    args = parser.parse_args(argv)
    version = project_version()
    out = args.out or REPO / "build" / f"valis-serving-{version}.tar.gz"
    try:
        count = stage(args.bundle, out, version, args.steer_object)
    except (ValisError, OSError) as exc:
        print(f"dist: {exc}", file=sys.stderr)
        return 1
    print(f"dist: {out} ({count} files, version {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
