"""The transfer room: AXFR and IXFR decisions and messages (``decide``,
``transfer_messages``, ...), the zone journal (``journal``), NOTIFY (``notify``,
``notify_send``), TSIG verdicts (``tsig_verdict``), secondaries' progress
(``secondary_progress``) and signed zones' transfers (``signed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.dns.transfer._transfer import (
        REFUSAL_KINDS,
        Grant,
        Listed,
        Refusal,
        datagram_response,
        decide,
        incremental_records,
        ixfr_serial,
        peer_host,
        refused,
        signed_answer,
        transfer_messages,
        transfer_question,
        transfer_steps,
        zone_records,
        zone_serial,
    )

__all__ = [
    "REFUSAL_KINDS",
    "Grant",
    "Listed",
    "Refusal",
    "datagram_response",
    "decide",
    "incremental_records",
    "ixfr_serial",
    "peer_host",
    "refused",
    "signed_answer",
    "transfer_messages",
    "transfer_question",
    "transfer_steps",
    "zone_records",
    "zone_serial",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "Grant": "valis_core.dns.transfer._transfer",
        "Listed": "valis_core.dns.transfer._transfer",
        "REFUSAL_KINDS": "valis_core.dns.transfer._transfer",
        "Refusal": "valis_core.dns.transfer._transfer",
        "datagram_response": "valis_core.dns.transfer._transfer",
        "decide": "valis_core.dns.transfer._transfer",
        "incremental_records": "valis_core.dns.transfer._transfer",
        "ixfr_serial": "valis_core.dns.transfer._transfer",
        "peer_host": "valis_core.dns.transfer._transfer",
        "refused": "valis_core.dns.transfer._transfer",
        "signed_answer": "valis_core.dns.transfer._transfer",
        "transfer_messages": "valis_core.dns.transfer._transfer",
        "transfer_question": "valis_core.dns.transfer._transfer",
        "transfer_steps": "valis_core.dns.transfer._transfer",
        "zone_records": "valis_core.dns.transfer._transfer",
        "zone_serial": "valis_core.dns.transfer._transfer",
    },
)
