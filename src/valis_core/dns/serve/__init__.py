"""The serve room: the UDP and TCP serve loops (``serve_udp``, ``serve_tcp``), TCP
framing (``tcp``), binding (``listen``), response rate limiting (``rrl``,
``limited_udp``), zone transfers on the serve loops (``transfer_serve``), the file
server (``file_server``) and the serving codec's self-test (``selftest``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.dns.serve._loops import (
        TCP_BATCH,
        TCP_TURNS,
        UDP_BATCH,
        AnswerFn,
        ServeCounts,
        ServeStats,
    )
    from valis_core.dns.serve._tcp_loop import TcpDrain, serve_tcp
    from valis_core.dns.serve._udp_loop import serve_udp

__all__ = [
    "TCP_BATCH",
    "TCP_TURNS",
    "UDP_BATCH",
    "AnswerFn",
    "ServeCounts",
    "ServeStats",
    "TcpDrain",
    "serve_tcp",
    "serve_udp",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "AnswerFn": "valis_core.dns.serve._loops",
        "ServeCounts": "valis_core.dns.serve._loops",
        "ServeStats": "valis_core.dns.serve._loops",
        "TCP_BATCH": "valis_core.dns.serve._loops",
        "TCP_TURNS": "valis_core.dns.serve._loops",
        "UDP_BATCH": "valis_core.dns.serve._loops",
        "TcpDrain": "valis_core.dns.serve._tcp_loop",
        "serve_tcp": "valis_core.dns.serve._tcp_loop",
        "serve_udp": "valis_core.dns.serve._udp_loop",
    },
)
