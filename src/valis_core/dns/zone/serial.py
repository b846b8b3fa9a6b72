"""SOA serials: RFC 1982 arithmetic, and the policies that pick an imported zone's serial.

Secondaries and caches only take a zone whose serial went up, so an import that changes
data without raising the serial is refused by default, naming both serials. A policy
(Knot's names) lets valis choose instead: ``increment`` the stored serial plus one,
``unixtime`` the current UNIX time, ``dateserial`` today's YYYYMMDDnn; a file serial that
is already higher wins over all three. ``keep`` takes the file's serial as it is.
"""

from __future__ import annotations

import datetime

from valis_core.errors import ValisError

_SERIAL_BITS = 32
_SERIAL_HALF = 2 ** (_SERIAL_BITS - 1)
_SERIAL_MOD = 2**_SERIAL_BITS

POLICIES = ("increment", "unixtime", "dateserial", "keep")
"""The policies an operator may name; no policy (``None``) refuses a serial that did not
go up."""


class SerialNotRaised(ValisError):
    """A zone's data changed but its serial did not go up."""


class UnknownSerialPolicy(ValisError):
    """A serial policy valis does not have."""


def policy_named(name: str) -> str | None:
    """The policy an operator named (``refuse``: none, the default)."""
    if name == "refuse":
        return None
    if name not in POLICIES:
        raise UnknownSerialPolicy(
            f"unknown serial policy {name!r}; use one of {', '.join(POLICIES)}, or refuse"
        )
    return name


def serial_gt(a: int, b: int) -> bool:
    """Whether serial ``a`` is greater than ``b`` in RFC 1982 arithmetic."""
    return a != b and ((a < b and b - a > _SERIAL_HALF) or (a > b and a - b < _SERIAL_HALF))


def next_serial(serial: int) -> int:
    """``serial`` plus one in RFC 1982 arithmetic, skipping 0."""
    return (serial + 1) % _SERIAL_MOD or 1


def raised_serial(policy: str | None, stored: int, *, now: float) -> int:
    """The serial a change of a zone's records moves ``stored`` to when the writer did not
    choose one (an owner UPDATE, an operator's SQL): ``unixtime`` and ``dateserial`` as
    for an import, anything else ``increment``. The journal's commit-time raise
    (migration 0006, ``valis_policy_serial``) is the same rule in SQL."""
    chosen = policy if policy in ("unixtime", "dateserial") else "increment"
    return choose_serial("", chosen, stored, stored, changed=True, now=now)


def choose_serial(
    zone: str,
    policy: str | None,
    stored: int | None,
    offered: int,
    *,
    changed: bool,
    now: float,
) -> int:
    """The serial an import stores: ``offered`` (the file's) when it is higher than
    ``stored`` or nothing was stored, ``stored`` when the data did not change, and
    otherwise what ``policy`` says; with no policy, ``SerialNotRaised`` names both.
    ``now`` is UNIX time, for ``unixtime`` and ``dateserial``."""
    if policy is not None:
        policy_named(policy)
    if stored is None or serial_gt(offered, stored) or policy == "keep":
        return offered
    if not changed:
        return stored
    if policy is None:
        relation = "equal to" if offered == stored else "lower than"
        raise SerialNotRaised(
            f"zone {zone}: the data changed but serial {offered} is {relation} the stored "
            f"serial {stored}; raise the SOA serial above {stored}, or choose a serial "
            f"policy (--serial-policy {'|'.join(POLICIES)})"
        )
    if policy == "increment":
        return next_serial(stored)
    if policy == "unixtime":
        candidate = int(now) % _SERIAL_MOD
    else:
        day = datetime.datetime.fromtimestamp(now, datetime.UTC)
        candidate = int(day.strftime("%Y%m%d")) * 100
    return candidate if serial_gt(candidate, stored) else next_serial(stored)
