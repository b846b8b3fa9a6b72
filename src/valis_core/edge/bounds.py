"""How much the public edge gives any client: connections, streams, bytes and seconds.

The edge faces the internet; :53 shares the resident's one thread with it. Every cost a
client can impose is bounded here, so a slow or hostile client costs the edge a slot and
a few kilobytes and never the DNS serve loops their turn (benchmarks/edge_abuse.py
measures :53 while the edge is abused). docs/edge.md lists these values.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class EdgeBounds:
    """The edge's limits. The defaults are the node's; tests pass smaller ones."""

    max_connections: int = 256
    """Connections served at once; a new one past it displaces the oldest connection
    still in its TLS handshake, else the oldest of all."""
    handshake_timeout: float = 10.0
    """Seconds from accept to a finished TLS handshake."""
    idle_timeout: float = 30.0
    """Seconds a connection may send nothing (between or inside requests)."""
    request_timeout: float = 10.0
    """Seconds from a request's first byte to its last (headers and body): a client that
    dribbles a request out (slowloris) is cut off here even while it keeps sending."""
    connection_lifetime: float = 300.0
    """Seconds one connection lives at most, however busy; the client reconnects."""
    requests_per_connection: int = 1000
    """Requests (HTTP/2 streams) one connection may make before it is closed."""
    concurrent_streams: int = 32
    """HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS."""
    max_header_bytes: int = 8192
    """A request's header block (request line or pseudo-headers and fields)."""
    max_body_bytes: int = 65535
    """A request body: the largest DNS message."""
    send_timeout: float = 10.0
    """Seconds a client may take to read a response before it is cut off."""
