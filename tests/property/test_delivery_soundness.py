"""Delivery soundness over generated tarballs: a sound one passes, one defect refuses it all."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.apply.delivery import (
    MANIFEST_NAME,
    DeliveryError,
    build_delivery_bytes,
    check_delivery,
    render_manifest,
)

segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
paths = st.lists(segment, min_size=1, max_size=3).map("/".join)
contents = st.binary(max_size=256)
modes = st.sampled_from([0o644, 0o755, 0o600, 0o700])


def _prefix_free(files: dict[str, tuple[bytes, int]]) -> bool:
    return not any(other.startswith(path + "/") for path in files for other in files)


file_sets = st.dictionaries(paths, st.tuples(contents, modes), min_size=1, max_size=6).filter(
    _prefix_free
)
versions = st.from_regex(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}", fullmatch=True)

Entry = tuple[tarfile.TarInfo, bytes]


def _regular(path: str, data: bytes, mode: int = 0o644) -> Entry:
    info = tarfile.TarInfo(path)
    info.size = len(data)
    info.mode = mode
    return info, data


def _special(path: str, kind: bytes, linkname: str = "") -> Entry:
    info = tarfile.TarInfo(path)
    info.type = kind
    info.linkname = linkname
    return info, b""


def _tarball(entries: list[Entry]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for info, data in entries:
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return gzip.compress(raw.getvalue(), mtime=0)


def _entries(version: str, files: dict[str, tuple[bytes, int]]) -> list[Entry]:
    manifest = render_manifest(version, files)
    return [_regular(MANIFEST_NAME, manifest)] + [
        _regular(path, data, mode) for path, (data, mode) in sorted(files.items())
    ]


@settings(max_examples=scaled(0.4))
@given(versions, file_sets)
def test_a_sound_delivery_passes_with_every_file_and_hash(
    version: str, files: dict[str, tuple[bytes, int]]
) -> None:
    manifest = check_delivery(io.BytesIO(build_delivery_bytes(version, files)))
    assert manifest.version == version
    assert {(f.path, f.sha256, f.mode) for f in manifest.files} == {
        (path, hashlib.sha256(data).hexdigest(), mode) for path, (data, mode) in files.items()
    }


@settings(max_examples=scaled(0.2))
@given(versions, file_sets)
def test_building_is_deterministic(version: str, files: dict[str, tuple[bytes, int]]) -> None:
    assert build_delivery_bytes(version, files) == build_delivery_bytes(version, dict(files))


Defect = Callable[[list[Entry], str], list[Entry]]


def _drop(entries: list[Entry], path: str) -> list[Entry]:
    return [entry for entry in entries if entry[0].name != path]


def _tamper(entries: list[Entry], path: str) -> list[Entry]:
    return [
        (_regular(info.name, data + b"\x00", info.mode) if info.name == path else (info, data))
        for info, data in entries
    ]


# Each defect, and a fragment the refusal must name.
DEFECTS: dict[str, tuple[Defect, Callable[[str], str]]] = {
    "unlisted file": (
        lambda e, p: [*e, _regular("extra/unlisted", b"x")],
        lambda p: "extra/unlisted",
    ),
    "missing file": (_drop, lambda p: p),
    "hash mismatch": (_tamper, lambda p: p),
    "absolute path": (lambda e, p: [*e, _regular("/etc/cron.d/x", b"x")], lambda p: "absolute"),
    "dot-dot": (lambda e, p: [*e, _regular("bin/../../escape", b"x")], lambda p: "'..'"),
    "symlink": (lambda e, p: [*e, _special("lib/link", tarfile.SYMTYPE, "/etc")], lambda p: "link"),
    "hardlink": (lambda e, p: [*e, _special("lib/hard", tarfile.LNKTYPE, p)], lambda p: "link"),
    "device": (lambda e, p: [*e, _special("dev/null", tarfile.CHRTYPE)], lambda p: "device"),
    "fifo": (lambda e, p: [*e, _special("run/fifo", tarfile.FIFOTYPE)], lambda p: "fifo"),
    "duplicate": (
        lambda e, p: [*e, *[entry for entry in e if entry[0].name == p]],
        lambda p: "twice",
    ),
    "no manifest": (lambda e, p: _drop(e, MANIFEST_NAME), lambda p: MANIFEST_NAME),
    "manifest tampered": (lambda e, p: _tamper(e, MANIFEST_NAME), lambda p: MANIFEST_NAME),
}


@settings(max_examples=scaled(0.8))
@given(versions, file_sets, st.sampled_from(sorted(DEFECTS)), st.data())
def test_one_defect_refuses_the_whole_delivery_naming_it(
    version: str, files: dict[str, tuple[bytes, int]], defect: str, data: st.DataObject
) -> None:
    victim = data.draw(st.sampled_from(sorted(files)))
    damage, named = DEFECTS[defect]
    tarball = _tarball(damage(_entries(version, files), victim))
    with pytest.raises(DeliveryError, match="refused") as refused:
        check_delivery(io.BytesIO(tarball))
    assert named(victim) in str(refused.value)


@settings(max_examples=scaled(0.3))
@given(versions, file_sets, st.data())
def test_a_truncated_delivery_is_refused(
    version: str, files: dict[str, tuple[bytes, int]], data: st.DataObject
) -> None:
    tarball = build_delivery_bytes(version, files)
    cut = data.draw(st.integers(min_value=0, max_value=len(tarball) - 1))
    with pytest.raises(DeliveryError, match="refused"):
        check_delivery(io.BytesIO(tarball[:cut]))


@pytest.mark.parametrize(
    "manifest",
    [
        b'{"format": 1, "version": "../1", "files": []}',
        b'{"format": 1, "version": "1", "files": [{"path": "../x", "sha256": "'
        + b"0" * 64
        + b'", "mode": "0644"}]}',
        b'{"format": 1, "version": "1", "files": [{"path": "bin/x", "sha256": "'
        + b"0" * 64
        + b'", "mode": "4755"}]}',
        b'{"format": 2, "version": "1", "files": []}',
        b"[]",
    ],
    ids=["version-escapes", "listed-dot-dot", "setuid-mode", "unknown-format", "not-an-object"],
)
def test_a_manifest_that_could_stage_outside_its_version_or_privileged_is_refused(
    manifest: bytes,
) -> None:
    tarball = _tarball([_regular(MANIFEST_NAME, manifest)])
    with pytest.raises(DeliveryError, match=MANIFEST_NAME):
        check_delivery(io.BytesIO(tarball))
