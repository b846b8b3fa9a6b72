"""The sk_lookup steer: the edge's declared ports on the unit address, to one socket.

fulcrum loads the steer object (``catchall-object-path``) while still privileged,
attaches its ``sk_lookup`` program to the unit's netns, and fills its maps with the
unit address and the declared ports. ``assign`` puts the node's listening TCP socket
into the SOCKMAP; a connection to a declared port on the unit address then reaches it,
whatever port the socket itself is bound on. ``close`` removes the link first, then
the object (contract §6).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address


class Steer:
    """One attached steer: the link in the unit's netns and the maps behind it."""

    @classmethod
    def attach(
        cls,
        object_path: str,
        netns_fd: int,
        unit_address: IPv4Address | IPv6Address,
        ports: frozenset[int],
    ) -> Steer:
        """Open, load and attach the steer object; nothing stays attached on failure."""
        raise NotImplementedError

    def assign(self, listening_fd: int) -> None:
        """Steer the declared ports to ``listening_fd``, replacing any socket in place."""
        raise NotImplementedError

    def close(self) -> None:
        """Detach the link, then release the object; idempotent."""
        raise NotImplementedError
