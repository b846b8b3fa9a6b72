"""What the resident serves on its pushed edge socket until the TLS edge exists.

The steered path is built before the public TLS edge (DNS-over-HTTPS) that will serve on
it. Rather than hold connections it never reads — they would hang — the resident accepts
each one, answers ``HTTP/1.1 503`` saying the edge is not built, and closes it: a client
learns at once that the node is there and that the edge is not. The TLS edge replaces
this module. Each connection is bounded in time, and in number at once.
"""

from __future__ import annotations

import contextlib
import logging

import trio

log = logging.getLogger("valis.resident")

BODY = b"valis: the TLS edge is not served by this node\n"
RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: %d\r\n"
    b"Connection: close\r\n"
    b"\r\n%s" % (len(BODY), BODY)
)
#: Seconds one connection may take to receive the answer.
CONNECTION_BOUND = 5.0
#: Bytes of the request read (and ignored) before the answer.
REQUEST_READ = 4096
#: Connections answered at once; more wait in the listen backlog.
MAX_CONNECTIONS = 64


async def serve_edge_placeholder(
    listener: trio.socket.SocketType,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer every connection on ``listener`` with the placeholder until cancelled."""
    limit = trio.Semaphore(MAX_CONNECTIONS)
    async with trio.open_nursery() as nursery:
        task_status.started()
        while True:
            await limit.acquire()
            try:
                conn, _ = await listener.accept()
            except OSError as exc:
                limit.release()
                log.warning("edge: accept failed: %s", exc.strerror or exc)
                await trio.sleep(0.1)  # a transient error (EMFILE) must not spin
                continue
            except BaseException:
                limit.release()
                raise
            nursery.start_soon(_answer, conn, limit)


async def _answer(conn: trio.socket.SocketType, limit: trio.Semaphore) -> None:
    try:
        with conn, trio.move_on_after(CONNECTION_BOUND), contextlib.suppress(OSError):
            await conn.recv(REQUEST_READ)  # the request's first bytes: a clean close after
            view = memoryview(RESPONSE)
            while view:
                view = view[await conn.send(view) :]
    finally:
        limit.release()
