"""Asking one DNS question, the one way every tier asks it: of a snapshot or an index in
this process (``answered``: the pure answer function, no socket), or of a server on
loopback (``over_udp``, ``over_tcp``: dnspython on the wire).

A question is built by ``question``: no EDNS unless asked for (``edns=True``, or
``do=True``, which needs it), and then EDNS version 0 with a 1232-byte payload. A wire ask
names its timeout: the callers differ (a server just started, one under a flood), and
the number belongs where the reason is.
"""

from __future__ import annotations

import dns.message
import dns.query

from valis_core.dns.answer import Transport, answer, answer_general
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.zone import ZoneIndex

LOOPBACK = "127.0.0.1"
PAYLOAD = 1232
"""The EDNS payload a question offers (the DNS flag day's figure)."""


def question(name: str, rtype: str, *, do: bool = False, edns: bool = False) -> dns.message.Message:
    """One query for ``name``/``rtype``; with EDNS (payload ``PAYLOAD``) when ``edns`` or
    ``do`` (the DNSSEC OK bit) is set."""
    if do or edns:
        return dns.message.make_query(name, rtype, want_dnssec=do, use_edns=0, payload=PAYLOAD)
    return dns.message.make_query(name, rtype, use_edns=False)


def answered(
    source: Snapshot | ZoneIndex,
    query: dns.message.Message | bytes,
    *,
    transport: Transport = Transport.TCP,
    general_too: bool = False,
) -> dns.message.Message:
    """The response ``source`` gives ``query`` (asserted not dropped), parsed; with
    ``general_too`` also asserted byte for byte what the general path (dnspython's full
    parser) gives."""
    wire = query if isinstance(query, bytes) else query.to_wire()
    response = answer(source, wire, transport=transport)
    assert response is not None, "the query was dropped"
    if general_too:
        assert answer_general(source, wire, transport=transport) == response
    return dns.message.from_wire(response)


def ask(
    source: Snapshot | ZoneIndex,
    name: str,
    rtype: str,
    *,
    do: bool = False,
    edns: bool = False,
    transport: Transport = Transport.TCP,
) -> dns.message.Message:
    """``answered`` for ``question(name, rtype, do=do, edns=edns)``."""
    return answered(source, question(name, rtype, do=do, edns=edns), transport=transport)


def over_udp(
    port: int, name: str, rtype: str, *, timeout: float, do: bool = False, edns: bool = False
) -> dns.message.Message:
    """``question(name, rtype, ...)`` asked over UDP of ``127.0.0.1:port``."""
    return dns.query.udp(question(name, rtype, do=do, edns=edns), LOOPBACK, port=port,
                         timeout=timeout)


def over_tcp(
    port: int, name: str, rtype: str, *, timeout: float, do: bool = False, edns: bool = False
) -> dns.message.Message:
    """``question(name, rtype, ...)`` asked over TCP of ``127.0.0.1:port``."""
    return dns.query.tcp(question(name, rtype, do=do, edns=edns), LOOPBACK, port=port,
                         timeout=timeout)


def rdata_texts(response: dns.message.Message) -> set[str]:
    """Every record of the answer section, its rdata in presentation form."""
    return {rdata.to_text() for rrset in response.answer for rdata in rrset}
