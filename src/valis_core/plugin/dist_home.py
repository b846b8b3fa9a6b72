"""The node's dist home: where the one private dist modules are installed from is recorded.

Registering is a provisioning act, like creating the run account, and idempotent: after
any number of runs the node has exactly one registration. Registering the same index
again changes nothing; registering another replaces the record (atomically: the node
always has the old registration or the new one, never none and never two).

A plain ``http:`` index is refused unless the operator allows it (``ALLOW_INSECURE``):
the pins a genesis deploy makes trust whatever the dist serves, and over plain http
that is whatever anyone on the path serves. https and file URLs need no allowance.
"""

from __future__ import annotations

import enum
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from valis_core.atomic import write_atomic
from valis_core.documents import Document
from valis_core.errors import ValisError

DEFAULT_DIST_HOME = Path("/etc/valis/dist")
REGISTRATION = "registration.json"
ALLOW_INSECURE = "--allow-insecure-dist"
"""The flag that accepts a plain-http private dist (``valis dist register``, ``valis
provision --dist``, and ``valis condense --genesis`` pinning modules from one)."""
_MAX_BYTES = 64 << 10


class DistHomeError(ValisError):
    """A dist registration that cannot be made or read."""


class Registered(enum.Enum):
    CREATED = "created"
    UNCHANGED = "unchanged"
    REPLACED = "replaced"


def is_plain_http(url: str) -> bool:
    """Whether ``url`` is fetched over plain (unauthenticated, unencrypted) http."""
    return urlsplit(url).scheme.lower() == "http"


def check_index_url(url: str, *, allow_insecure: bool = False) -> str:
    """``url`` if it can name a PEP 503 simple index: https or file (plain http only with
    ``allow_insecure``), no query or fragment; the canonical form ends in one slash."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "file"):
        raise DistHomeError(
            f"private dist {url!r} is not an http, https or file URL of a simple index"
        )
    if parts.query or parts.fragment:
        raise DistHomeError(f"private dist {url!r} has a query or fragment; give the index root")
    if parts.scheme != "file" and not parts.hostname:
        raise DistHomeError(f"private dist {url!r} names no host")
    if parts.scheme == "file" and not parts.path.startswith("/"):
        raise DistHomeError(f"private dist {url!r} is not an absolute file URL")
    if parts.scheme == "http" and not allow_insecure:
        raise DistHomeError(
            f"private dist {url!r} is plain http: the module pins a genesis deploy makes "
            "would trust whatever anyone on the path serves; publish it over https (or as "
            f"a file URL), or pass {ALLOW_INSECURE} to accept that"
        )
    return url.rstrip("/") + "/"


def registration_path(home: Path) -> Path:
    return home / REGISTRATION


def _check_recorded(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str:
        raise TypeError(f"index_url {value!r} is not a string")
    try:
        # Recorded once it was accepted (a plain-http one with the allowance then).
        check_index_url(value, allow_insecure=True)
    except DistHomeError as exc:
        raise ValueError(f"index_url: {exc}") from None


@attrs.frozen
class Registration:
    """What ``registration.json`` records: the node's one private dist."""

    index_url: str = attrs.field(validator=_check_recorded)


DOCUMENT: Document[Registration] = Document(
    kind=Registration,
    name=REGISTRATION,
    error=DistHomeError,
    remedy="register the dist again with `valis dist register`",
    max_bytes=_MAX_BYTES,
)
"""``registration.json`` as a JSON document (``valis_core.documents``)."""


def read_registration(home: Path) -> str | None:
    """The registered index URL, or ``None`` when the node has registered none."""
    path = registration_path(home)
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DistHomeError(f"dist registration {path} cannot be read: {exc.strerror}") from exc
    registration = DOCUMENT.read(data, name=f"dist registration {path} is damaged")
    return check_index_url(registration.index_url, allow_insecure=True)


def register_dist(home: Path, url: str, *, allow_insecure: bool = False) -> Registered:
    """Record ``url`` as the node's one private dist (plain http only with
    ``allow_insecure``)."""
    canonical = check_index_url(url, allow_insecure=allow_insecure)
    before = read_registration(home)
    if before == canonical:
        return Registered.UNCHANGED
    try:
        home.mkdir(mode=0o755, parents=True, exist_ok=True)
        write_atomic(
            registration_path(home), DOCUMENT.render(Registration(canonical)), mode=0o644
        )
    except OSError as exc:
        raise DistHomeError(
            f"cannot record the dist registration in {home}: {exc.strerror or exc}"
        ) from exc
    return Registered.CREATED if before is None else Registered.REPLACED


def registered_dist(home: Path) -> str:
    """The registered index URL; a node with none cannot install a module."""
    url = read_registration(home)
    if url is None:
        raise DistHomeError(
            f"no private dist is registered in {home}; register one with `valis dist "
            "register --dist-home ... URL` before condensing a node that runs modules"
        )
    return url

