"""The fabric: the node's capability-gated internal HTTP endpoint.

It listens on 127.0.0.1 at an ephemeral port inside the node's network namespace (never
on the public wire) and answers only a request carrying ``Authorization: Bearer
<token>``: no token is 401, a wrong one 403. The token is minted afresh on every boot
and written, mode 0600, to ``fabric.token`` in the state directory before the port is
published in ``fabric.json`` (mode 0644: host, port, pid, token file) — so only the run
account (and root) can use the fabric, a restart revokes every token handed out, and no
long-lived secret joins the backup set. Both files are removed when the fabric stops.

Routes (``GET``/``HEAD``):

- ``/status``: JSON — node, location, owner public key, store and fence generation,
  readiness, each served zone's serial, record count;
- ``/metrics``: Prometheus text;
- ``/view/soa?zone=Z``: the anonymous public view of zone Z's apex SOA (200 when
  answered authoritatively, 404 otherwise), computed by the real answer path.

A connection gets ``REQUEST_TIMEOUT`` seconds to deliver its head; at most
``MAX_CONNECTIONS`` are served at once and any beyond that get 503 at once.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from valis_core.atomic import write_atomic
from valis_core.documents import Document
from valis_core.errors import ValisError
from valis_core.resident.fabric_http import (
    HttpError,
    Request,
    RequestReader,
    render_response,
)
from valis_core.resident.metrics import CONTENT_TYPE, render
from valis_core.resident.status_document import SOA_ANSWER, STATUS, VIEW_REFUSAL, ViewRefusal
from valis_core.resident.views import NodeViews, public_soa
from valis_core.state_layout import FABRIC_INFO, FABRIC_TOKEN

log = logging.getLogger("valis.resident.fabric")

HOST = "127.0.0.1"
TOKEN_FILE = FABRIC_TOKEN
INFO_FILE = FABRIC_INFO
REQUEST_TIMEOUT = 5.0
MAX_CONNECTIONS = 32
_JSON = "application/json"


@attrs.frozen
class FabricAddress:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class FabricError(ValisError):
    """The fabric could not be reached or answered nonsense."""


@attrs.frozen
class FabricInfo:
    """What ``fabric.json`` publishes: where the fabric listens, whose it is, and where its
    token is kept."""

    host: str
    port: int
    url: str
    pid: int
    token_file: str

    @property
    def address(self) -> FabricAddress:
        return FabricAddress(self.host, self.port)


INFO_DOCUMENT: Document[FabricInfo] = Document(
    kind=FabricInfo,
    name=INFO_FILE,
    error=FabricError,
    remedy="the resident writes it when its fabric listens (restart the node)",
)
"""``fabric.json`` as a JSON document (``valis_core.documents``)."""


def mint_token() -> str:
    return secrets.token_urlsafe(32)


class Fabric:
    """Serves ``views`` to holders of ``token``; publishes itself under ``state_dir``."""

    def __init__(self, state_dir: Path, views: NodeViews, *, token: str | None = None) -> None:
        self._state_dir = state_dir
        self._views = views
        self.token = token or mint_token()
        self._limiter = trio.CapacityLimiter(MAX_CONNECTIONS)

    async def serve(self, *, task_status: trio.TaskStatus[FabricAddress]) -> None:
        """Listen, publish the address, and serve until cancelled; unpublish on the way out."""
        listeners = await trio.open_tcp_listeners(0, host=HOST)
        try:
            port = int(listeners[0].socket.getsockname()[1])
            address = FabricAddress(HOST, port)
            self._publish(address)
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(trio.serve_listeners, self._connection, listeners)
                    task_status.started(address)
            finally:
                self._unpublish()
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)

    # -- publication -------------------------------------------------------------------

    def _publish(self, address: FabricAddress) -> None:
        token_path = self._state_dir / TOKEN_FILE
        write_atomic(token_path, (self.token + "\n").encode("ascii"), mode=0o600)
        info = FabricInfo(address.host, address.port, address.url, os.getpid(), str(token_path))
        write_atomic(self._state_dir / INFO_FILE, INFO_DOCUMENT.render(info), mode=0o644)

    def _unpublish(self) -> None:
        for name in (INFO_FILE, TOKEN_FILE):
            try:
                (self._state_dir / name).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("fabric: cannot remove %s: %s", self._state_dir / name, exc)

    # -- connections -------------------------------------------------------------------

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                self._limiter.acquire_nowait()
            except trio.WouldBlock:
                await _send(stream, render_response(503, b"busy\n"))
                return
            try:
                response = b""
                with trio.move_on_after(REQUEST_TIMEOUT):
                    response = await self._exchange(stream)
                if response:
                    await _send(stream, response)
            finally:
                self._limiter.release()

    async def _exchange(self, stream: trio.SocketStream) -> bytes:
        reader = RequestReader()
        try:
            while True:
                data = await stream.receive_some(4096)
                if not data:
                    return b""
                request = reader.receive(bytes(data))
                if request is not None:
                    break
        except HttpError as exc:
            return render_response(exc.status, (exc.detail + "\n").encode("utf-8"))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""
        return self.respond(request)

    def respond(self, request: Request) -> bytes:
        """The whole response to one request (authorisation first, then the route)."""
        include_body = request.method != "HEAD"
        presented = request.bearer_token()
        if presented is None:
            return render_response(
                401,
                b"a capability token is required (Authorization: Bearer <token>)\n",
                extra={"WWW-Authenticate": 'Bearer realm="valis-fabric"'},
                include_body=include_body,
            )
        if not hmac.compare_digest(presented.encode("utf-8"), self.token.encode("utf-8")):
            return render_response(403, b"wrong capability token\n", include_body=include_body)
        if request.method not in ("GET", "HEAD"):
            return render_response(
                405, b"GET or HEAD only\n", extra={"Allow": "GET, HEAD"}, include_body=include_body
            )
        route = _ROUTES.get(request.path)
        if route is None:
            return render_response(404, b"no such view\n", include_body=include_body)
        try:
            status, body, content_type = route(self._views, request)
        except Exception:
            log.exception("fabric: %s failed", request.path)
            status, body, content_type = 500, b"internal error\n", "text/plain; charset=utf-8"
        return render_response(status, body, content_type=content_type, include_body=include_body)


_Route = Callable[[NodeViews, Request], tuple[int, bytes, str]]


def _refused(why: str) -> bytes:
    return VIEW_REFUSAL.render(ViewRefusal(why))


def _status(views: NodeViews, _: Request) -> tuple[int, bytes, str]:
    return 200, STATUS.render(views.status()), _JSON


def _metrics(views: NodeViews, _: Request) -> tuple[int, bytes, str]:
    return 200, render(views.metric_families()).encode("utf-8"), CONTENT_TYPE


def _view_soa(views: NodeViews, request: Request) -> tuple[int, bytes, str]:
    zone = request.query.get("zone", "")
    if not zone:
        return 400, _refused("give the zone: /view/soa?zone=example.org."), _JSON
    try:
        view = public_soa(views.holder, zone)
    except Exception as exc:  # a name dnspython cannot make a query for
        return 400, _refused(f"not a zone name: {exc}"), _JSON
    answer = SOA_ANSWER.render(SOA_ANSWER.structure(view.document()))
    return (200 if view.answered else 404), answer, _JSON


_ROUTES: dict[str, _Route] = {
    "/status": _status,
    "/metrics": _metrics,
    "/view/soa": _view_soa,
}


async def _send(stream: trio.SocketStream, data: bytes) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT):
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def fabric_get(address: FabricAddress, token: str, target: str) -> tuple[int, bytes]:
    """GET ``target`` from a fabric; (status, body). Used by bring-up to ask its own
    public view over the real endpoint."""
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {address.host}:{address.port}\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    with trio.fail_after(REQUEST_TIMEOUT):
        stream = await trio.open_tcp_stream(address.host, address.port)
        async with stream:
            await stream.send_all(request)
            chunks = bytearray()
            while data := await stream.receive_some(65536):
                chunks += data
                if len(chunks) > 1 << 20:
                    raise FabricError("fabric: response larger than 1 MiB")
    head, _, body = bytes(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise FabricError("fabric: malformed response")
    return int(status_line[1]), body
