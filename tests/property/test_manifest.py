"""Properties of the store manifest: canonical bytes, faithful round trip, clean refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.errors import ValisError
from valis_core.fence import MAX_GENERATION
from valis_core.store.manifest import (
    Manifest,
    ManifestError,
    ModulePin,
    dumps,
    is_genesis,
    loads,
    make_default_manifest,
    normalize_name,
)

SHA_A = "a" * 64

names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,12}[A-Za-z0-9])?", fullmatch=True)
versions = st.builds(
    lambda release, suffix: ".".join(map(str, release)) + suffix,
    st.lists(st.integers(0, 300), min_size=1, max_size=4),
    st.sampled_from(["", "rc1", "a2", "b3", ".post1", ".dev4", "+local.7", "rc1.post2.dev3"]),
)
shas = st.binary(min_size=32, max_size=32).map(bytes.hex)
pins = st.builds(ModulePin, name=names, version=versions, sha256=shas)
manifests = st.builds(
    Manifest,
    generation=st.integers(0, MAX_GENERATION),
    modules=st.lists(pins, max_size=5, unique_by=lambda pin: normalize_name(pin.name)).map(
        tuple
    ),
    store_head=st.none() | shas,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def document(manifest: Manifest) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(dumps(manifest))
    return result


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


def refusal(data: bytes) -> ManifestError | None:
    """The refusal of reading ``data``, or None when it reads as a manifest."""
    try:
        loads(data)
    except ManifestError as refused:
        return refused
    return None


@given(manifests)
def test_round_trip_is_byte_stable(manifest: Manifest) -> None:
    data = dumps(manifest)
    assert loads(data) == manifest
    assert dumps(loads(data)) == data


@given(manifests, st.data())
def test_equal_manifests_dump_equal_bytes(manifest: Manifest, data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(manifest.modules))
    twin = Manifest(
        generation=manifest.generation, modules=shuffled, store_head=manifest.store_head
    )
    assert twin == manifest
    assert dumps(twin) == dumps(manifest)


@given(manifests, st.data())
def test_any_json_spelling_of_a_manifest_reads_to_the_same_manifest(
    manifest: Manifest, data: st.DataObject
) -> None:
    doc = document(manifest)
    doc["modules"] = data.draw(st.permutations(doc["modules"]))
    keys = data.draw(st.permutations(sorted(doc)))
    indent = data.draw(st.sampled_from([None, 2]))
    spelled = json.dumps({key: doc[key] for key in keys}, indent=indent)
    assert dumps(loads(spelled.encode())) == dumps(manifest)


@given(manifests, st.data())
def test_distinct_manifests_dump_distinct_bytes(manifest: Manifest, data: st.DataObject) -> None:
    other = data.draw(manifests)
    assert (dumps(other) == dumps(manifest)) == (other == manifest)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_either_read_as_a_manifest_or_raise_manifest_error(data: bytes) -> None:
    refused = refusal(data)
    assert refused is None or "\n" not in str(refused)


@given(json_values)
def test_arbitrary_json_is_refused_with_manifest_error(value: Any) -> None:
    with pytest.raises(ManifestError):
        loads(encode(value))


@given(manifests, st.data())
def test_a_manifest_with_any_field_replaced_reads_or_raises_manifest_error(
    manifest: Manifest, data: st.DataObject
) -> None:
    doc = document(manifest)
    if doc["modules"] and data.draw(st.booleans()):
        pin = data.draw(st.sampled_from(doc["modules"]))
        pin[data.draw(st.sampled_from(sorted(pin)))] = data.draw(json_values)
    else:
        doc[data.draw(st.sampled_from([*sorted(doc), "extra"]))] = data.draw(json_values)
    refused = refusal(encode(doc))
    assert refused is None or "\n" not in str(refused)


@given(manifests, st.data())
def test_a_missing_field_is_refused_never_defaulted(
    manifest: Manifest, data: st.DataObject
) -> None:
    doc = document(manifest)
    if doc["modules"] and data.draw(st.booleans()):
        pin = data.draw(st.sampled_from(doc["modules"]))
        del pin[data.draw(st.sampled_from(sorted(pin)))]
    else:
        del doc[data.draw(st.sampled_from(sorted(doc)))]
    with pytest.raises(ManifestError, match="missing"):
        loads(encode(doc))


def pinned(*pins: dict[str, Any]) -> bytes:
    return encode({"format": 1, "generation": 1, "modules": list(pins), "store_head": None})


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b'{"format": 1, "format": 1}', "twice"),
        (b"[" * 100_000, "not valid JSON"),
        (b'{"format":1,"generation":NaN,"modules":[],"store_head":null}', "NaN"),
        (b'{"generation":0,"modules":[],"store_head":null}', "format"),
        (b'{"format":2,"generation":0,"modules":[],"store_head":null}', "format 2"),
        (b'{"format":1,"generation":-1,"modules":[],"store_head":null}', "generation"),
        (b'{"format":1,"generation":true,"modules":[],"store_head":null}', "generation"),
        (b'{"format":1,"generation":1.0,"modules":[],"store_head":null}', "generation"),
        (b'{"format":1,"generation":"1","modules":[],"store_head":null}', "generation"),
        (b'{"format":1,"generation":0,"modules":[],"store_head":"ABC"}', "store_head"),
        (b'{"format":1,"generation":0,"modules":{},"store_head":null}', "modules"),
        (b'{"format":1,"generation":0,"modules":[],"store_head":null,"x":1}', "'x'"),
        (pinned({"name": "a", "version": "1", "sha256": SHA_A.upper()}), "sha256"),
        (pinned({"name": "a", "version": "1", "sha256": SHA_A[:-1]}), "sha256"),
        (pinned({"name": "a", "version": ">=1", "sha256": SHA_A}), "version"),
        (pinned({"name": "a", "version": "1.*", "sha256": SHA_A}), "version"),
        (pinned({"name": "-a", "version": "1", "sha256": SHA_A}), "name"),
        (pinned({"name": "a", "version": "1"}), "modules[0].sha256"),
        (
            pinned(
                {"name": "Foo_Bar", "version": "1", "sha256": SHA_A},
                {"name": "foo-bar", "version": "2", "sha256": SHA_A},
            ),
            "pinned twice",
        ),
    ],
)
def test_malformed_manifests_are_refused_saying_what_is_wrong(data: bytes, says: str) -> None:
    with pytest.raises(ManifestError) as caught:
        loads(data)
    assert isinstance(caught.value, ValisError)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_newer_format_asks_for_a_newer_valis() -> None:
    with pytest.raises(ManifestError, match=r"newer valis.*run a valis that reads format 7"):
        loads(b'{"format":7,"generation":0,"modules":[],"store_head":null}')


def test_the_genesis_manifest_has_a_fixed_spelling() -> None:
    assert dumps(make_default_manifest()) == (
        b'{"format":1,"generation":0,"modules":[],"store_head":null}\n'
    )


@given(manifests)
def test_genesis_is_generation_zero_without_a_store_head(manifest: Manifest) -> None:
    assert is_genesis(manifest) == (manifest.generation == 0 and manifest.store_head is None)


def test_the_default_manifest_is_genesis_and_a_restore_at_generation_zero_is_not() -> None:
    assert is_genesis(make_default_manifest())
    assert not is_genesis(Manifest(generation=0, store_head=SHA_A))
    assert not is_genesis(Manifest(generation=1))
    with_modules = Manifest(generation=0, modules=(ModulePin("mod", "1.0", SHA_A),))
    assert is_genesis(with_modules)


def test_constructing_a_manifest_refuses_what_loads_would_refuse() -> None:
    with pytest.raises(ValueError, match="pinned twice"):
        Manifest(generation=0, modules=(ModulePin("a.b", "1", SHA_A), ModulePin("A-B", "2", SHA_A)))
    with pytest.raises(ValueError, match="generation"):
        Manifest(generation=MAX_GENERATION + 1)
