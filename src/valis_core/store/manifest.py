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

import re
from collections.abc import Iterable

import attrs

from valis_core.documents import Document, is_sha256, shown
from valis_core.errors import ValisError
from valis_core.fence import GENESIS_GENERATION, MAX_GENERATION

FORMAT = 1

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


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: the identity pip gives a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _check_name(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or _NAME.fullmatch(value) is None:
        raise ValueError(f"module name {shown(value)} is not a distribution name")


def _check_version(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or _VERSION.fullmatch(value) is None:
        raise ValueError(f"version {shown(value)} is not an exact PEP 440 version")


def _check_sha256(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not is_sha256(value):
        raise ValueError(f"sha256 {shown(value)} is not 64 lowercase hex digits")


def _check_head(_: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and not is_sha256(value):
        raise ValueError(f"store_head {shown(value)} is not 64 lowercase hex digits (nor null)")


def _check_generation(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not GENESIS_GENERATION <= value <= MAX_GENERATION:
        raise ValueError(f"generation {shown(value)} is not an integer 0..{MAX_GENERATION}")


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
            raise TypeError(f"modules must hold ModulePin values, not {shown(pin)}")
        key = normalize_name(pin.name)
        if key in seen:
            raise ValueError(f"module {shown(key)} is pinned twice")
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


DOCUMENT: Document[Manifest] = Document(
    kind=Manifest,
    name="manifest",
    error=ManifestError,
    remedy="restore the manifest from the backup set or re-run condense",
    format=FORMAT,
    compact=True,
)
"""The store manifest as a JSON document (``valis_core.documents``)."""


def dumps(manifest: Manifest) -> bytes:
    """The canonical JSON bytes of a manifest; equal manifests give equal bytes."""
    return DOCUMENT.render(manifest)


def loads(data: bytes) -> Manifest:
    """Read manifest bytes; anything that is not a manifest raises ``ManifestError``.
    Every field must be present: a default never stands in (a manifest without its head
    would read as genesis)."""
    return DOCUMENT.read(data)
