"""A resident's push, and nothing else: mint, push, serve a tag on what the steer brings.

Run by the project's interpreter (one the run account can reach) inside a netns, as
whichever account the test chooses:

    python pusher.py CONTROL_SOCKET PORTS TAG LIFETIME

It pushes with the resident's own code (``valis_core.resident.push``) and prints one
line: ``accepted HOST PORT`` or ``refused <reason>``. Once accepted it answers every
connection with ``TAG`` (after reading its first bytes) and closes it, until killed or
LIFETIME seconds have passed.
"""

from __future__ import annotations

import socket
import sys

import trio

from valis_core.resident.push import PushRefused, mint_listener, push_listener


async def main(path: str, ports: frozenset[int], tag: bytes, lifetime: float) -> None:
    listener = mint_listener(socket.AF_INET)
    try:
        await push_listener(path, ports, listener)
    except PushRefused as exc:
        print(f"refused {exc}", flush=True)
        return
    host, port = listener.getsockname()[:2]
    print(f"accepted {host} {port}", flush=True)
    sock = trio.socket.from_stdlib_socket(listener)
    with trio.move_on_after(lifetime):
        while True:
            conn, _ = await sock.accept()
            with conn:
                with trio.move_on_after(2):
                    await conn.recv(64)  # the client's request, read so the close is clean
                await conn.send(tag)


if __name__ == "__main__":
    ports = frozenset(int(item) for item in sys.argv[2].split(","))
    trio.run(main, sys.argv[1], ports, sys.argv[3].encode(), float(sys.argv[4]))
