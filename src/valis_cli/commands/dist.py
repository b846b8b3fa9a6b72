"""``valis dist register|show|index|probe``: the private dist modules are installed from."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from valis_core.plugin.dist_home import (
    ALLOW_INSECURE,
    DEFAULT_DIST_HOME,
    read_registration,
    register_dist,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dist", help="register, publish or measure the private dist modules come from"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    home = argparse.ArgumentParser(add_help=False)
    home.add_argument("--dist-home", type=Path, default=DEFAULT_DIST_HOME,
                      help="where the node records its dist (default: %(default)s)")
    reg = verbs.add_parser("register", parents=[home],
                           help="record URL as this node's one private dist (idempotent)")
    reg.add_argument("url", metavar="URL", help="the simple index (https or file URL)")
    reg.add_argument(ALLOW_INSECURE, action="store_true",
                     help="accept a plain-http URL (a genesis pinning from it must say so "
                     "again)")
    reg.set_defaults(handler=_register)
    show = verbs.add_parser("show", parents=[home], help="print the registered dist")
    show.set_defaults(handler=_show)
    index = verbs.add_parser("index", help="write the PEP 503 pages for a directory of wheels")
    index.add_argument("wheelhouse", type=Path, metavar="DIR")
    index.set_defaults(handler=_index)
    probe = verbs.add_parser(
        "probe", help="ask a dist to install its whole catalogue; write the refusal list"
    )
    probe.add_argument("url", metavar="URL")
    probe.add_argument("--out", type=Path, required=True, metavar="DIR",
                       help="the measuring directory; refusals.txt is written there")
    probe.set_defaults(handler=_probe)


def _register(args: argparse.Namespace) -> int:
    outcome = register_dist(args.dist_home, args.url,
                            allow_insecure=args.allow_insecure_dist)
    print(f"valis: private dist {read_registration(args.dist_home)} {outcome.value} "
          f"in {args.dist_home}")
    return 0


def _show(args: argparse.Namespace) -> int:
    url = read_registration(args.dist_home)
    if url is None:
        print(f"valis: no private dist is registered in {args.dist_home}")
        return 1
    print(url)
    return 0


def _index(args: argparse.Namespace) -> int:
    from valis_core.plugin.simple_index import DistError
    from valis_core.plugin.wheelhouse import SIMPLE, write_simple_index

    if not args.wheelhouse.is_dir():
        raise DistError(
            f"dist index: {args.wheelhouse} is not a directory; give the directory holding "
            "the wheels"
        )
    try:
        indexed = write_simple_index(args.wheelhouse)
    except OSError as exc:
        raise DistError(
            f"dist index: cannot write the index under {args.wheelhouse / SIMPLE}: "
            f"{exc.strerror or exc}; run as an account that can write the wheelhouse"
        ) from None
    wheels = sum(len(files) for files in indexed.values())
    print(f"valis: indexed {wheels} wheels of {len(indexed)} projects; register "
          f"{(args.wheelhouse.resolve() / SIMPLE).as_uri()}/")
    return 0


def _probe(args: argparse.Namespace) -> int:
    from valis_core.atomic import write_atomic
    from valis_core.plugin.dist_probe import probe_dist
    from valis_core.plugin.simple_index import DistError

    def cannot_write(exc: OSError) -> DistError:
        return DistError(
            f"dist probe: cannot write the measuring directory {args.out}: "
            f"{exc.strerror or exc}; give --out a directory this account can write"
        )

    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(exc) from None
    if not os.access(args.out, os.W_OK | os.X_OK):
        raise cannot_write(PermissionError(13, "Permission denied"))
    report = probe_dist(args.url, args.out)
    lines = [f"{refusal.offered}: {refusal.reason}\n" for refusal in report.refusals]
    try:
        write_atomic(args.out / "refusals.txt", "".join(lines).encode("utf-8"), mode=0o644)
    except OSError as exc:
        raise cannot_write(exc) from None
    if not report.discriminates:
        print("valis: the known-bad control dist installed: this probe measured nothing")
        return 2
    print(f"valis: {args.url} offers {len(report.offered)}, installs "
          f"{len(report.installed)} together, refuses {len(report.refusals)} "
          f"(listed in {args.out / 'refusals.txt'})")
    return 1 if report.refusals else 0
