"""The JSON documents the node reads and writes, converted at the edge in one place.

Every JSON document valis reads or writes — the store manifest, the delivery and backup
manifests, the dist registration, the fenced-out verdict, the unit records, the fabric's
address and its ``/status`` (which ``valis status --json`` prints) — is an attrs class,
and this module is where such a class meets bytes: one ``cattrs`` converter, configured
once, and one way to refuse a document that is not what it claims to be.

The converter is strict: an integer field takes a JSON integer (never ``true``, ``1.0``
or ``"1"``), a string field a string, a float field a number, a boolean field ``true`` or
``false``, a tuple field a JSON list and a class a JSON object. An object with a key its
class does not know is refused, and so is one lacking a field — a field's default never
stands in for a missing value (it would read a damaged store head as genesis) unless the
field is declared ``may_be_absent`` (a key an older writer did not write yet). The JSON
itself must be strict too: no key twice, no ``NaN`` or ``Infinity``.

A ``Document`` names a document the way its refusals do, the error class its readers
raise (a ``ValisError`` subclass of its own domain: ``BackupError``, ``DeliveryError``…),
what the operator does about a damaged one, the ``"format"`` number it carries if any,
and how it is spelled (indentation, separators, trailing newline), so equal values give
equal bytes. ``read`` turns bytes into the class or raises that error with a message
naming the document, the field (``files[2].sha256``) and what was wrong; ``render`` is
the inverse, and ``structure``/``unstructure`` do the same for a document that arrives or
leaves as a parsed value (an HTTP body read elsewhere).

A class's own checks are attrs validators raising ``ValueError``/``TypeError`` with a
message that names the field, so a value that violates them can be neither read nor made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar, get_args, get_origin

import attrs
import cattrs
import cattrs.gen

from valis_core.errors import ValisError

T = TypeVar("T")

_ABSENT_OK = "valis_may_be_absent"
_MAX_SHOWN = 80


def may_be_absent() -> dict[str, bool]:
    """Field metadata: a document without this key reads with the field's default (a key
    added after the document's first writers, so what they wrote still reads)."""
    return {_ABSENT_OK: True}


def shown(value: object) -> str:
    """A value as it may appear in a one-line message: repr, cut short."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


# --- the converter --------------------------------------------------------------------


def _strict(check: Callable[[Any], bool], label: str) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        if not check(value):
            raise TypeError(f"expected {label}, got {_kind(value)}")
        return value

    return structure


def _kind(value: object) -> str:
    return {
        dict: "an object", list: "a list", str: "a string", bool: "a boolean",
        int: "an integer", float: "a number", type(None): "null",
    }.get(type(value), type(value).__name__)


def _is_tuple(kind: Any) -> bool:
    args = get_args(kind)
    return get_origin(kind) is tuple and len(args) == 2 and args[1] is Ellipsis


def _is_dict(kind: Any) -> bool:
    return get_origin(kind) is dict


def _structure_object(
    kind: Any, generated: Callable[[Any, Any], Any]
) -> Callable[[Any, Any], Any]:
    """``generated`` (cattrs' structuring of class ``kind``) behind the checks cattrs
    leaves to us: a JSON object, and every field present unless it ``may_be_absent``."""
    required = [field for field in attrs.fields(kind) if not field.metadata.get(_ABSENT_OK)]

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise TypeError(f"expected an object, got {_kind(value)}")
        missing = []
        for field in required:
            if field.name not in value:
                exc = KeyError(field.name)
                exc.add_note(cattrs.AttributeValidationNote(
                    f"@ attribute {field.name}", field.name, field.type
                ))
                missing.append(exc)
        if missing:
            raise cattrs.ClassValidationError(f"structuring {kind.__name__}", missing, kind)
        return generated(value, kind)

    return structure


def _structure_items(
    converter: cattrs.Converter, kind: Any, container: type, inner_kind: Any
) -> Callable[[Any, Any], Any]:
    """A JSON list (``container`` list) or object (``container`` dict) whose items are
    each structured as ``inner_kind``, every wrong item named by its index or key."""

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not container:
            expected = "a list" if container is list else "an object"
            raise TypeError(f"expected {expected}, got {_kind(value)}")
        inner = converter.get_structure_hook(inner_kind)
        items: Any = value
        pairs = enumerate(items) if container is list else items.items()
        result, problems = {}, []
        for at, item in pairs:
            try:
                result[at] = inner(item, inner_kind)
            except Exception as exc:  # collected, then raised as one
                exc.add_note(cattrs.IterableValidationNote(f"@ {at!r}", at, inner_kind))
                problems.append(exc)
        if problems:
            raise cattrs.IterableValidationError(f"structuring {kind}", problems, kind)
        return tuple(result.values()) if container is list else result

    return structure


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict(lambda v: type(v) is int, "an integer"))
    converter.register_structure_hook(str, _strict(lambda v: type(v) is str, "a string"))
    converter.register_structure_hook(bool, _strict(lambda v: type(v) is bool, "a boolean"))
    number = _strict(lambda v: type(v) in (int, float), "a number")
    converter.register_structure_hook(float, lambda value, _: float(number(value, _)))
    converter.register_structure_hook_factory(
        _is_tuple, lambda kind: _structure_items(converter, kind, list, get_args(kind)[0])
    )
    converter.register_structure_hook_factory(
        _is_dict, lambda kind: _structure_items(converter, kind, dict, get_args(kind)[1])
    )
    converter.register_structure_hook_factory(
        attrs.has,
        lambda kind: _structure_object(
            kind, cattrs.gen.make_dict_structure_fn(kind, converter, _cattrs_forbid_extra_keys=True)
        ),
    )
    converter.register_unstructure_hook_factory(
        _is_tuple,
        lambda kind: _unstructure_list(converter.get_unstructure_hook(get_args(kind)[0])),
    )
    return converter


def _unstructure_list(inner: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    return lambda value: [inner(item) for item in value]


converter = _make_converter()
"""The one converter every document goes through; a document class needing a field
spelled otherwise than its type (a file mode as ``"0644"``) says so by ``register_field``,
beside the class."""


def register_field(
    kind: type[Any],
    field: str,
    structure: Callable[[Any], Any],
    unstructure: Callable[[Any], Any],
) -> None:
    """Spell ``kind``'s ``field`` in JSON by ``unstructure`` and read it back by
    ``structure`` (which raises ``ValueError``/``TypeError`` naming what was wrong)."""
    overrides: dict[str, Any] = {
        field: cattrs.gen.override(
            struct_hook=lambda value, _: structure(value), unstruct_hook=unstructure
        )
    }
    generated = cattrs.gen.make_dict_structure_fn(
        kind, converter, _cattrs_forbid_extra_keys=True, **overrides
    )
    converter.register_structure_hook(kind, _structure_object(kind, generated))
    converter.register_unstructure_hook(
        kind, cattrs.gen.make_dict_unstructure_fn(kind, converter, **overrides)
    )


# --- refusals: the one place cattrs' errors become a message --------------------------


def _where(exc: BaseException) -> str:
    """The step from a containing value to where ``exc`` was found: ``.field``,
    ``[index]`` or ``['key']``."""
    parts = []
    for note in getattr(exc, "__notes__", []):
        if isinstance(note, cattrs.AttributeValidationNote):
            parts.append(f".{note.name}")
        elif isinstance(note, cattrs.IterableValidationNote):
            parts.append(f"[{note.index!r}]")
    return "".join(parts)


def _problems(exc: BaseException, path: str = "") -> list[str]:
    """Each leaf problem of ``exc`` as ``field: what was wrong``."""
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        found = [f"unknown fields {shown(sorted(exc.extra_fields))}"]
    elif isinstance(exc, BaseExceptionGroup):
        found = []
        for inner in exc.exceptions:
            found += _problems(inner, path + _where(inner))
        return found
    elif isinstance(exc, KeyError):
        found = ["required field missing"]
    else:
        found = [str(exc)]
    field = path.removeprefix(".")
    return [f"{field}: {text}" if field else text for text in found]


def describe(exc: BaseException) -> str:
    """What ``structure`` found wrong, naming each field: one line."""
    return "; ".join(_problems(exc)) or type(exc).__name__


_REFUSED = (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError, ValueError, TypeError)


# --- documents -------------------------------------------------------------------------


@attrs.frozen
class Document(Generic[T]):
    """A JSON document: its class, how refusals name it, and how it is spelled."""

    kind: Any
    """The attrs class (or ``tuple[Class, ...]``) the document holds."""
    name: str
    """How a refusal names it when the reader does not say which file it came from."""
    error: type[ValisError]
    """What its readers raise: the refusal's class."""
    remedy: str
    """What the operator does about a damaged one (the end of the refusal)."""
    format: int | None = None
    """The ``"format"`` number the document carries (None: it carries none)."""
    indent: int | None = None
    compact: bool = False
    """Separators without spaces (``","`` and ``":"``)."""
    newline: bool = True
    sort_keys: bool = True
    """Keys sorted (else in the class's field order: a report printed for people too)."""
    max_bytes: int | None = None
    encoding: str = "utf-8"

    def refusal(self, problem: str, *, name: str | None = None) -> ValisError:
        """The error this document's readers raise for ``problem``."""
        return self.error(f"{name or self.name}: {problem}; {self.remedy}")

    def structure(self, value: Any, *, name: str | None = None) -> T:
        """``value`` (parsed JSON) as the document's class, its ``"format"`` checked;
        anything else is refused by ``error``."""
        if self.format is not None:
            value = self._without_format(value, name)
        try:
            result: T = converter.structure(value, self.kind)
        except _REFUSED as exc:
            raise self.refusal(describe(exc), name=name) from None
        return result

    def _without_format(self, value: Any, name: str | None) -> dict[str, Any]:
        if type(value) is not dict:
            raise self.refusal(f"expected a JSON object, got {_kind(value)}", name=name)
        rest = dict(value)
        version = rest.pop("format", None)
        if type(version) is not int:
            raise self.refusal('missing or non-integer "format"', name=name)
        if version > self.format_read:
            raise self.error(
                f"{name or self.name}: format {shown(version)} was written by a newer valis "
                f"and this one reads only format {self.format_read}; run a valis that reads "
                f"format {shown(version)}"
            )
        if version != self.format_read:
            raise self.refusal(
                f"format {shown(version)} is not {self.format_read}, the one this valis reads",
                name=name,
            )
        return rest

    @property
    def format_read(self) -> int:
        assert self.format is not None
        return self.format

    def unstructure(self, value: T) -> Any:
        """``value`` as plain JSON values (dicts, lists, strings, numbers)."""
        document = converter.unstructure(value, self.kind)
        if self.format is not None:
            document["format"] = self.format
        return document

    def render(self, value: T) -> bytes:
        """The document's bytes in its own spelling; equal values, equal bytes."""
        text = json.dumps(
            self.unstructure(value),
            sort_keys=self.sort_keys,
            indent=self.indent,
            separators=(",", ":") if self.compact else None,
            ensure_ascii=True,
        )
        return (text + ("\n" if self.newline else "")).encode("ascii")

    def parse(self, data: bytes, *, name: str | None = None) -> Any:
        """``data`` as strict JSON (no key twice, no ``NaN``), within ``max_bytes``."""
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise self.refusal(f"larger than {self.max_bytes} bytes", name=name)
        try:
            return json.loads(
                data.decode(self.encoding),
                object_pairs_hook=_refuse_duplicate_keys,
                parse_constant=_refuse_constant,
            )
        except (ValueError, RecursionError) as exc:
            raise self.refusal(f"not valid JSON ({exc})", name=name) from None

    def read(self, data: bytes, *, name: str | None = None) -> T:
        """The document in ``data``; anything else is refused by ``error``, naming the
        document (``name``, else its own), the field and what was wrong."""
        return self.structure(self.parse(data, name=name), name=name)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {shown(key)} appears twice")
        result[key] = value
    return result


# --- checks shared by documents --------------------------------------------------------

SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)


def is_sha256(value: object) -> bool:
    """64 lowercase hex digits (a sha256, an Ed25519 public key)."""
    return type(value) is str and SHA256.fullmatch(value) is not None
