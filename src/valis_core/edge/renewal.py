"""When the node next asks its CA for a certificate: a pure schedule over plain numbers.

A certificate is renewed once a third of its lifetime is left (Let's Encrypt's advice,
and what certbot does): early enough that a CA outage of days passes unnoticed, late
enough that a 90-day certificate is asked for about every 60 days. A failed attempt is
tried again after a backoff that doubles from ``FIRST_BACKOFF`` up to ``MAX_BACKOFF``, so
a broken CA is not hammered and a healed one is noticed within hours. While attempts
fail the node keeps serving the certificate it has. Times are seconds since the epoch.
"""

from __future__ import annotations

import attrs

RENEW_WHEN_LEFT = 1 / 3
"""The fraction of a certificate's lifetime left when it is renewed."""

FIRST_BACKOFF = 60.0
"""Seconds before the first retry after a failed attempt."""

MAX_BACKOFF = 6 * 3600.0
"""The longest wait between two failed attempts."""


@attrs.frozen
class Lifetime:
    """When a certificate became valid and when it stops being valid."""

    not_before: float
    not_after: float


def renew_at(lifetime: Lifetime) -> float:
    """The moment a third of ``lifetime`` is left."""
    span = max(0.0, lifetime.not_after - lifetime.not_before)
    return lifetime.not_after - span * RENEW_WHEN_LEFT


def backoff(failures: int) -> float:
    """The wait after ``failures`` attempts in a row failed (0 for none)."""
    if failures <= 0:
        return 0.0
    return min(MAX_BACKOFF, FIRST_BACKOFF * 2.0 ** min(failures - 1, 32))


def next_attempt(lifetime: Lifetime | None, now: float, failures: int) -> float:
    """When to ask the CA next, given the certificate held (``None``: none yet), the
    time now (after a failure: the time of that failure) and the failures in a row."""
    due = now if lifetime is None else renew_at(lifetime)
    return max(due, now + backoff(failures))


def is_due(lifetime: Lifetime | None, now: float) -> bool:
    """Whether a certificate must be asked for now (none held, or a third is left)."""
    return lifetime is None or now >= renew_at(lifetime)
