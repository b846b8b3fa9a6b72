"""The answer room: one DNS query answered from a zone index, bytes in and bytes out
(``answer``, ``Transport``), signed zones' answers (``signed``), the snapshot served and
its response caches (``snapshot``), the message as the answer path reads and writes it
(``message``, which the transfer room's messages share) and the compiled UDP fast path
with the Python path as its oracle (``fastpath``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.dns.answer._answer import (
        UPDATE_ELSEWHERE,
        Transport,
        answer,
        answer_general,
    )
    from valis_core.dns.answer.message import (
        MAX_OPTIONS,
        MAX_POINTERS,
        MAX_SIGNED_OTHER,
        SERVER_PAYLOAD,
        TCP_LIMIT,
    )

__all__ = [
    "MAX_OPTIONS",
    "MAX_POINTERS",
    "MAX_SIGNED_OTHER",
    "SERVER_PAYLOAD",
    "TCP_LIMIT",
    "UPDATE_ELSEWHERE",
    "Transport",
    "answer",
    "answer_general",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "MAX_OPTIONS": "valis_core.dns.answer.message",
        "MAX_POINTERS": "valis_core.dns.answer.message",
        "MAX_SIGNED_OTHER": "valis_core.dns.answer.message",
        "SERVER_PAYLOAD": "valis_core.dns.answer.message",
        "TCP_LIMIT": "valis_core.dns.answer.message",
        "UPDATE_ELSEWHERE": "valis_core.dns.answer._answer",
        "Transport": "valis_core.dns.answer._answer",
        "answer": "valis_core.dns.answer._answer",
        "answer_general": "valis_core.dns.answer._answer",
    },
)
