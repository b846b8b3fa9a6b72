"""The store manifest: which generation this store is, which modules it runs, its head.

A manifest is what condense carries from one host to the next. Its JSON form is
canonical — sorted keys, no optional whitespace, modules in name order, one trailing
newline — so equal manifests are byte-identical on disk and their hashes agree.

Genesis. ``make_default_manifest()`` is generation 0 with no modules and no store head.
``is_genesis`` asks the question deploy needs answered — does this node have a
predecessor? — and answers yes exactly when the generation is 0 and there is no store
head. Modules do not enter into it: a genesis deploy may install modules. A manifest at
generation 0 *with* a head is a restore of a node that never moved (its durable identity
must be restored, not minted), so it is not genesis.

Fields:

- ``generation``: the store generation the instance fence projects; 0..2**63-1 (the
  fence's range).
- ``modules``: one ``ModulePin`` per module distribution, with its exact PEP 440
  version and the sha256 of its wheel in the node's private dist. Names are unique
  under PEP 503 normalisation (``Foo_Bar`` and ``foo-bar`` are one distribution) and
  kept sorted by that normalised name.
- ``store_head``: the sha256 (64 lowercase hex digits) of the durable store content
  this manifest describes, or ``None`` before the store has a head (genesis).

The JSON carries ``"format": 1``; a reader refuses a format it does not know, so an
older node never misreads a manifest written by a newer one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import attrs
import cattrs
import cattrs.gen

from valis_core.errors import ValisError
from valis_core.fence import GENESIS_GENERATION, MAX_GENERATION

FORMAT = 1

_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
# PEP 508 distribution name.
_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.ASCII | re.IGNORECASE)
# PEP 440 version (packaging's VERSION_PATTERN): an exact version, never a specifier.
_VERSION = re.compile(
    r"""
    v?
    (?:[0-9]+!)?                                  # epoch
    [0-9]+(?:\.[0-9]+)*                           # release
    (?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?          # pre
    (?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?                      # post
    (?:[-_.]?dev[-_.]?[0-9]*)?                                          # dev
    (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?          # local
    """,
    re.ASCII | re.IGNORECASE | re.VERBOSE,
)


class ManifestError(ValisError):
    """A manifest that cannot be read: the stored bytes are not a manifest we know."""


def _shown(value: object) -> str:
    """A value as it may appear in a one-line message: repr, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: the identity pip gives a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _check_name(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or _NAME.fullmatch(value) is None:
        raise ValueError(f"module name {_shown(value)} is not a distribution name")


def _check_version(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or _VERSION.fullmatch(value) is None:
        raise ValueError(f"version {_shown(value)} is not an exact PEP 440 version")


def _is_sha256(value: object) -> bool:
    return type(value) is str and _SHA256.fullmatch(value) is not None


def _check_sha256(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not _is_sha256(value):
        raise ValueError(f"sha256 {_shown(value)} is not 64 lowercase hex digits")


def _check_head(_: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and not _is_sha256(value):
        raise ValueError(f"store_head {_shown(value)} is not 64 lowercase hex digits (nor null)")


def _check_generation(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not GENESIS_GENERATION <= value <= MAX_GENERATION:
        raise ValueError(f"generation {_shown(value)} is not an integer 0..{MAX_GENERATION}")


@attrs.frozen
class ModulePin:
    """One module distribution pinned by exact version and wheel hash."""

    name: str = attrs.field(validator=_check_name)
    version: str = attrs.field(validator=_check_version)
    sha256: str = attrs.field(validator=_check_sha256)


def _canonical_modules(modules: Iterable[ModulePin]) -> tuple[ModulePin, ...]:
    return tuple(sorted(modules, key=lambda pin: normalize_name(pin.name)))


def _check_modules(
    _: object, attribute: attrs.Attribute[tuple[ModulePin, ...]], value: tuple[ModulePin, ...]
) -> None:
    seen: set[str] = set()
    for pin in value:
        if not isinstance(pin, ModulePin):
            raise TypeError(f"modules must hold ModulePin values, not {_shown(pin)}")
        key = normalize_name(pin.name)
        if key in seen:
            raise ValueError(f"module {_shown(key)} is pinned twice")
        seen.add(key)


@attrs.frozen
class Manifest:
    """A store's generation, module pins and head; modules are kept in canonical order."""

    generation: int = attrs.field(validator=_check_generation)
    modules: tuple[ModulePin, ...] = attrs.field(
        default=(), converter=_canonical_modules, validator=_check_modules
    )
    store_head: str | None = attrs.field(default=None, validator=_check_head)


def make_default_manifest() -> Manifest:
    """The genesis manifest: generation 0, no modules, no store head."""
    return Manifest(generation=GENESIS_GENERATION)


def is_genesis(manifest: Manifest) -> bool:
    """True when the node has no predecessor: generation 0 and no store head."""
    return manifest.generation == GENESIS_GENERATION and manifest.store_head is None


# --- the JSON edge: the one place a manifest meets bytes -------------------------------


def _strict(kind: type[Any], label: str) -> Any:
    def structure(value: Any, _: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {label}, got {type(value).__name__}")
        return value

    return structure


_converter = cattrs.Converter(forbid_extra_keys=True)
_converter.register_structure_hook(int, _strict(int, "an integer"))
_converter.register_structure_hook(str, _strict(str, "a string"))
_structure_pin = cattrs.gen.make_dict_structure_fn(
    ModulePin, _converter, _cattrs_forbid_extra_keys=True
)


def _structure_pin_object(value: Any, _: Any) -> ModulePin:
    if type(value) is not dict:
        raise TypeError(f"expected a module object, got {type(value).__name__}")
    return _structure_pin(value, ModulePin)


_structure_pin_tuple = _converter.get_structure_hook(tuple[ModulePin, ...])


def _structure_modules(value: Any, kind: Any) -> tuple[ModulePin, ...]:
    if type(value) is not list:
        raise TypeError(f"expected a list of modules, got {type(value).__name__}")
    result: tuple[ModulePin, ...] = _structure_pin_tuple(value, kind)
    return result


_converter.register_structure_hook(ModulePin, _structure_pin_object)
_converter.register_structure_hook_func(
    lambda kind: kind == tuple[ModulePin, ...], _structure_modules
)


def _describe(exc: BaseException, _: Any) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown fields {_shown(sorted(exc.extra_fields))}"
    if isinstance(exc, KeyError):
        return "required field missing"
    return str(exc)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {_shown(key)} appears twice")
        result[key] = value
    return result


def dumps(manifest: Manifest) -> bytes:
    """The canonical JSON bytes of a manifest; equal manifests give equal bytes."""
    document = _converter.unstructure(manifest)
    document["format"] = FORMAT
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return (text + "\n").encode("ascii")


def loads(data: bytes) -> Manifest:
    """Read manifest bytes; anything that is not a manifest raises ``ManifestError``."""
    remedy = "restore the manifest from the backup set or re-run condense"
    try:
        document = json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_refuse_duplicate_keys,
            parse_constant=_refuse_constant,
        )
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"manifest: not valid JSON ({exc}); {remedy}") from None
    if type(document) is not dict:
        raise ManifestError(f"manifest: expected a JSON object; {remedy}")
    version = document.pop("format", None)
    if type(version) is not int:
        raise ManifestError(f"manifest: missing or non-integer \"format\"; {remedy}")
    if version > FORMAT:
        raise ManifestError(
            f"manifest: format {_shown(version)} was written by a newer valis and this one "
            f"reads only format {FORMAT}; run a valis that reads format {_shown(version)}"
        )
    if version != FORMAT:
        raise ManifestError(f"manifest: format {_shown(version)} is not {FORMAT}; {remedy}")
    missing = [field.name for field in attrs.fields(Manifest) if field.name not in document]
    if missing:
        # Never fall back to a default: a manifest without its head would read as genesis.
        raise ManifestError(f"manifest: required fields missing {missing}; {remedy}")
    try:
        return _converter.structure(document, Manifest)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        problems = "; ".join(cattrs.transform_error(exc, format_exception=_describe))
        raise ManifestError(f"manifest: {problems}; {remedy}") from None
