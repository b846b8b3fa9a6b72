"""A zone's key rollovers as pure state machines: the steps, what each publishes, and when
each ends. Everything that decides a rollover's state lives in these two tables.

The roll is RFC 7583's Double-DS method (section 3.3.2) for the key's role as the secure
entry point, with the zone-signing role moved by pre-publication (section 3.2.1), since a
combined signing key (CSK) plays both. The new key's DS goes to the parent first; the new
key is published beside the old one only once every cached DS set holds its DS; the zone
is signed by it only once every cached DNSKEY set holds it; the old key leaves the DNSKEY
RRset only once no cached signature was made by it; last the parent drops the old DS.

========================  ============  ==============  =========  ==========  ==========
step                      DNSKEY        signs DNSKEY    signs zone parent DS   leaves on
========================  ============  ==============  =========  ==========  ==========
``ds-submit``             old           old             old        old + new   operator
``ds-propagating``        old           old             old        old + new   Dprp_P+TTLds
``published``             old + new     old + new       old        old + new   Dprp+TTLkey
``switched``              old + new     old + new       new        old + new   Dprp+TTLsig
``ds-retire``             new           new             new        new         operator
========================  ============  ==============  =========  ==========  ==========

The two operator steps wait for the parent: the operator submits the DS set
``parent_ds`` names and confirms it is published (``confirm``). CDS and CDNSKEY say the
same set, for parents that scan. Confirming ``ds-retire`` ends the roll: the new key is
then simply the zone's key. A step ending on time ends at ``since + wait``; the resident
moves it on at any moment after that, and the next step's wait counts from then (late
is always safe: each step only lasts longer).

A zone signed with a KSK/ZSK split rolls each key alone. Its KSK (flags 257, signing the
DNSKEY RRset, its DS at the parent) rolls by the table above, the zone's RRsets staying
signed by the ZSK throughout. Its ZSK (flags 256, signing everything else) rolls by
pre-publication (RFC 7583 section 3.2.1), which never involves the parent:

========================  =================  =========  ==========
step                      DNSKEY (ZSKs)      signs zone leaves on
========================  =================  =========  ==========
``zsk-published``         old + new          old        Dprp+TTLkey
``zsk-switched``          old + new          new        Dprp+TTLsig
========================  =================  =========  ==========

after which the old ZSK leaves the DNSKEY RRset and the roll is over. ``zone_keying``
puts a zone's keys and its roll together into what it publishes and signs with.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from valis_core.errors import ValisError

DS_SUBMIT = "ds-submit"
DS_PROPAGATING = "ds-propagating"
PUBLISHED = "published"
SWITCHED = "switched"
DS_RETIRE = "ds-retire"
DONE = "done"
STEPS = (DS_SUBMIT, DS_PROPAGATING, PUBLISHED, SWITCHED, DS_RETIRE)
"""The Double-DS roll's steps in order; ``DONE`` is no step: the roll is over."""
ZSK_PUBLISHED = "zsk-published"
ZSK_SWITCHED = "zsk-switched"
ZSK_STEPS = (ZSK_PUBLISHED, ZSK_SWITCHED)
"""The pre-publish ZSK roll's steps in order."""
ALL_STEPS = STEPS + ZSK_STEPS
"""Every step of either roll: a step's number (``step_number``) is its place here."""
OPERATOR_STEPS = frozenset({DS_SUBMIT, DS_RETIRE})
"""Steps that end when the operator confirms the parent publishes the DS set shown."""

CSK = "csk"
KSK = "ksk"
ZSK = "zsk"
KINDS = (CSK, KSK, ZSK)
"""What a roll replaces: a combined signing key, or a split zone's KSK or ZSK."""

MAX_SECONDS = 30 * 86400
"""The longest any timing may be (a TTL above a month is a typo)."""


class RolloverError(ValisError):
    """A rollover event that its current step does not allow."""


@attrs.frozen
class Timing:
    """The durations a rollover waits on (seconds), RFC 7583's names in brackets: the
    DNSKEY RRset's TTL (TTLkey), the DS TTL at the parent (TTLds), the largest TTL of
    any signed RRset in the zone (TTLsig), how long a change takes to reach all the
    zone's servers (Dprp), and all the parent's (Dprp_P)."""

    dnskey_ttl: int = 3600
    ds_ttl: int = 86400
    max_zone_ttl: int = 86400
    propagation_delay: int = 300
    parent_propagation_delay: int = 3600

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(Timing):
            value = getattr(self, field.name)
            if not 0 <= value <= MAX_SECONDS:
                raise RolloverError(
                    f"{field.name.replace('_', '-')} {value} is not between 0 and "
                    f"{MAX_SECONDS} seconds"
                )


@attrs.frozen
class Keying:
    """What a zone publishes and signs with at one step, by key tag."""

    published: tuple[int, ...]
    """The keys in the DNSKEY RRset."""
    key_signers: tuple[int, ...]
    """The keys whose RRSIGs cover the DNSKEY RRset."""
    zone_signer: int
    """The key that signs every other RRset."""
    parent_ds: tuple[int, ...]
    """The keys whose DS the parent should hold (and CDS/CDNSKEY say)."""


@attrs.frozen
class Rollover:
    """One zone's roll of its ``kind`` of key from ``old`` to ``new`` (key tags), at
    ``step`` since ``since`` (UNIX time), waiting per ``timing``."""

    old: int
    new: int
    step: str
    since: float
    timing: Timing
    kind: str = CSK

    def __attrs_post_init__(self) -> None:
        if self.kind not in KINDS:
            raise RolloverError(f"rollover kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.step not in steps(self.kind):
            raise RolloverError(
                f"{self.kind} rollover step {self.step!r} is not one of "
                f"{', '.join(steps(self.kind))}"
            )
        if self.old == self.new:
            raise RolloverError(
                f"a rollover needs a new key with another key tag than the old one "
                f"({self.old}); make the new key again"
            )


def steps(kind: str) -> tuple[str, ...]:
    """The steps of a roll of ``kind``, in order."""
    return ZSK_STEPS if kind == ZSK else STEPS


def step_number(step: str) -> int:
    """A step's number, from 1, for metrics: the Double-DS steps 1 to 5, then the ZSK
    roll's 6 and 7."""
    return ALL_STEPS.index(step) + 1


def kind_for(split: bool, zsk: bool) -> str:
    """The roll a zone's operator asks for: ``zsk`` rolls a split zone's ZSK; otherwise
    its KSK, or the CSK of a zone signed with one."""
    if zsk and not split:
        raise RolloverError(
            "the zone signs with a combined signing key (CSK), which has no ZSK to roll "
            "alone; roll the CSK (without --zsk)"
        )
    return ZSK if zsk else KSK if split else CSK


def stable(tag: int) -> Keying:
    """A zone not rolling: its one key does everything."""
    return Keying((tag,), (tag,), tag, (tag,))


def zone_keying(key_tag: int, zsk_tag: int | None, roll: Rollover | None) -> Keying:
    """What a zone publishes and signs with: signed with the key ``key_tag`` (its CSK,
    or with ``zsk_tag`` its KSK) and rolling by ``roll``. A split zone's KSK side
    (DNSKEY signers, the parent's DS) and ZSK side (the zone's signer) are each stable
    unless that key rolls; its DNSKEY RRset holds both sides' keys."""
    if zsk_tag is None:
        return stable(key_tag) if roll is None else keying(roll)
    ksk = keying(roll) if roll is not None and roll.kind != ZSK else stable(key_tag)
    zsk = keying(roll) if roll is not None and roll.kind == ZSK else stable(zsk_tag)
    return Keying(ksk.published + zsk.published, ksk.key_signers, zsk.zone_signer,
                  ksk.parent_ds)


def keying(roll: Rollover) -> Keying:
    """What the rolling key's role publishes and signs with at ``roll``'s step (the
    tables above); a ZSK roll's keys sign no DNSKEY RRset and have no DS."""
    old, new, both = roll.old, roll.new, (roll.old, roll.new)
    if roll.step == ZSK_PUBLISHED:
        return Keying(both, (), old, ())
    if roll.step == ZSK_SWITCHED:
        return Keying(both, (), new, ())
    if roll.step in (DS_SUBMIT, DS_PROPAGATING):
        return Keying((old,), (old,), old, both)
    if roll.step == PUBLISHED:
        return Keying(both, both, old, both)
    if roll.step == SWITCHED:
        return Keying(both, both, new, both)
    return Keying((new,), (new,), new, (new,))


def wait(roll: Rollover) -> float | None:
    """How long ``roll``'s step lasts; ``None`` for a step the operator ends."""
    t = roll.timing
    if roll.step == DS_PROPAGATING:
        return t.parent_propagation_delay + t.ds_ttl
    if roll.step in (PUBLISHED, ZSK_PUBLISHED):
        return t.propagation_delay + t.dnskey_ttl
    if roll.step in (SWITCHED, ZSK_SWITCHED):
        return t.propagation_delay + t.max_zone_ttl
    return None


def due(roll: Rollover) -> float | None:
    """When ``roll``'s step ends on time; ``None`` while it waits for the operator."""
    length = wait(roll)
    return None if length is None else roll.since + length


def start(old: int, new: int, timing: Timing, now: float, kind: str = CSK) -> Rollover:
    """A roll of ``kind`` from ``old`` to ``new`` begun at ``now``: for a CSK or KSK the
    parent is to add the new DS, a ZSK is published at once."""
    return Rollover(old, new, steps(kind)[0], now, timing, kind)


def _next(kind: str, step: str) -> str:
    order = steps(kind)
    at = order.index(step)
    return order[at + 1] if at + 1 < len(order) else DONE


def advance(roll: Rollover, now: float) -> Rollover | None:
    """``roll`` at ``now``: a step whose time has come is followed by the next, which
    begins at ``now``, the moment it is written and served, never at the earlier moment
    it could have begun (its wait then counts from when resolvers can see it). ``None``:
    the last step's time has come (only a ZSK roll ends on time) and the roll is over."""
    moved: Rollover = roll
    for _ in ALL_STEPS:
        end = due(moved)
        if end is None or end > now:
            break
        following = _next(moved.kind, moved.step)
        if following == DONE:
            return None
        moved = attrs.evolve(moved, step=following, since=now)
    return moved


def confirm(roll: Rollover, now: float) -> Rollover | None:
    """The operator says the parent publishes the DS set this step asks for: the next
    step begins at ``now`` (``None``: the roll is over). Refused at any other step."""
    if roll.kind == ZSK:
        raise RolloverError(
            f"the rollover replaces the zone's ZSK (step {roll.step}), which the parent "
            "never holds a DS of: it ends on time, with nothing to confirm"
        )
    if roll.step not in OPERATOR_STEPS:
        end = due(roll)
        raise RolloverError(
            f"the rollover is at step {roll.step}, which waits for time, not for the "
            f"parent (it ends at {end:.0f}); confirm the DS only at "
            f"{' or '.join(sorted(OPERATOR_STEPS))}"
        )
    following = _next(roll.kind, roll.step)
    if following == DONE:
        return None
    return attrs.evolve(roll, step=following, since=now)


def ttl_shortfall(
    timing: Timing, zone: str, above: Iterable[tuple[str, str, int]], cuts: Iterable[str]
) -> str | None:
    """Why ``timing.max_zone_ttl`` is too short for ``zone``, whose records with a longer
    TTL are ``above`` (owner, type, TTL) and whose delegation points are ``cuts``: the
    largest TTL of a record it signs (neither a delegation's NS nor anything beneath a
    cut, which are never signed), and what waiting less does; ``None`` when no signed
    record's TTL exceeds it. The zone's negative TTL (the lower of the SOA's TTL and its
    MINIMUM, which its NSEC and NSEC3 records are served with) is never above its SOA's
    TTL, so the records cover it. A roll's switched step waits ``max_zone_ttl`` for
    signatures by the old key to leave caches; a resolver still holding one when the old
    key leaves the DNSKEY RRset finds the answer bogus."""
    delegations = {cut.lower().rstrip(".") for cut in cuts}
    apex = zone.lower().rstrip(".")
    largest: tuple[int, str, str] | None = None
    for owner, rtype, ttl in above:
        name = owner.lower().rstrip(".")
        labels = name.split(".")
        ancestors = {".".join(labels[i:]) for i in range(1, len(labels))}
        beneath = bool(ancestors & delegations)
        if beneath or (name in delegations and name != apex and rtype != "DS"):
            continue  # a delegation's NS and glue: the child's, never signed here
        if ttl > timing.max_zone_ttl and (largest is None or ttl > largest[0]):
            largest = (ttl, owner, rtype)
    if largest is None:
        return None
    ttl, owner, rtype = largest
    return (
        f"max-zone-ttl {timing.max_zone_ttl} is below zone {zone}'s largest signed TTL, "
        f"{ttl} ({owner} {rtype}): a roll's switched step waits only {timing.max_zone_ttl} "
        "s for signatures by the old key to leave resolvers' caches, and one holding such "
        f"a signature when the old key is withdrawn finds the zone bogus; give "
        f"--max-zone-ttl {ttl} or more, or lower that TTL"
    )
