"""Condense: deploy, evacuate and restore as one ordered path with different starting points.

``plan_condense`` is pure: a request in, the ordered steps out. ``execute_plan`` runs the
steps in order against a ``CondenseHost`` (one method per step kind), and the first step
that fails stops the plan: no later step runs. The ordering is the whole point:

1. host assessed (every clause of ``valis assess``);
2. durable state materialised: the default manifest at generation 0 for genesis, or the
   backup set's head for evacuate and restore (``restore_backup``: the owner seed comes
   back byte for byte; genesis mints none here, the resident's custody does at first
   boot);
3. modules condensed into the destination root: the head's pinned modules installed
   from the node's registered private dist (for genesis, the modules the request names,
   pinned to the wheels the dist offers now and recorded in the genesis head);
4. site facts rendered (for evacuate, the new location's);
5. every served zone proven servable, one step per zone: its rows in operator state, and
   when operator state says it is signed, every key its signing and its roll need held
   in the state directory (``valis_core.dns.dnssec.zone_servable``, as the resident decides);
   then, when the edge is elected, its certificate (``valis_core.edge.boot_certificate``,
   as the resident's edge stage decides);
6. the fence: seeded at generation 0 for genesis, or claimed at the backup head's
   generation + 1 for evacuate and restore, and that generation recorded as the store's;
7. the unit started;
8. read back: READY, then an authoritative apex SOA for every served zone.

So a zone the node cannot serve, or durable state that was never materialised, never
reaches the start; and the fence is only claimed (fencing the predecessor out) once the
successor is known able to serve: every refusal the resident's bring-up would make that
the state directory and operator state decide on their own is made before the claim
(what only the running node can find — a CA refusing an ACME order, a module failing to
import — is not). A claim the fence refuses (the fence already moved past
this backup's head) stops the plan before the start, as any failure does.

Recovery is re-run (contract §6): every step is idempotent against the state directory a
stopped run left, so the same request run again finishes the plan.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from valis_core.errors import ValisError
from valis_core.fence import GENESIS_GENERATION, MAX_GENERATION, FenceState
from valis_core.store.manifest import normalize_name


class RequestKind(enum.Enum):
    """Where a condense starts from."""

    GENESIS = "genesis"
    """Deploy: no predecessor."""
    EVACUATE = "evacuate"
    """A successor at a new network location, from the predecessor's backup set."""
    RESTORE = "restore"
    """A fresh state directory from a backup set (a durable head)."""


class StepKind(enum.Enum):
    """What one step does; ``CondenseHost`` has one method per kind, named by the value."""

    ASSESS_HOST = "assess_host"
    MATERIALISE_DURABLE_STATE = "materialise_durable_state"
    CONDENSE_MODULES = "condense_modules"
    RENDER_SITE_FACTS = "render_site_facts"
    PROVE_ZONE_SERVABLE = "prove_zone_servable"
    PROVE_EDGE_SERVABLE = "prove_edge_servable"
    SEED_FENCE = "seed_fence"
    CLAIM_FENCE = "claim_fence"
    START_UNIT = "start_unit"
    READ_BACK_READY = "read_back_ready"
    READ_BACK_APEX_SOA = "read_back_apex_soa"


class CondenseError(ValisError):
    """A condense request that cannot be planned, or a plan that stopped at a step."""


def _zones(_: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]) -> None:
    for zone in value:
        if not isinstance(zone, str) or not zone.endswith(".") or zone != zone.lower():
            raise CondenseError(
                f"condense: zone {zone!r} is not a lowercase absolute name (trailing dot)"
            )
    if len(set(value)) != len(value):
        raise CondenseError("condense: a served zone is named twice")


def _as_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


_REQUIREMENT = re.compile(r"([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9][0-9A-Za-z.!+_-]*)")


def parse_module_requirement(text: str) -> tuple[str, str]:
    """``NAME==VERSION`` as (name, version): a genesis node's module, by exact version."""
    found = _REQUIREMENT.fullmatch(text.strip())
    if found is None:
        raise CondenseError(
            f"condense: module {text!r} is not NAME==VERSION (an exact version; the wheel "
            "hash is pinned from the private dist)"
        )
    return found.group(1), found.group(3)


def _modules(
    _: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]
) -> None:
    names = [normalize_name(parse_module_requirement(text)[0]) for text in value]
    if len(set(names)) != len(names):
        raise CondenseError("condense: a module is named twice")


@attrs.frozen
class CondenseRequest:
    """What to condense: the starting point, the zones the node serves, and for evacuate
    and restore the verified backup set (its path and store generation); ``edge``: the
    launcher config elects the edge (``edge-port``), so its certificate is proved too."""

    kind: RequestKind
    zones: tuple[str, ...] = attrs.field(converter=_as_tuple, validator=_zones)
    backup: str | None = None
    backup_generation: int | None = None
    modules: tuple[str, ...] = attrs.field(
        default=(), converter=_as_tuple, validator=_modules
    )
    edge: bool = False

    def __attrs_post_init__(self) -> None:
        if self.modules and self.kind is not RequestKind.GENESIS:
            raise CondenseError(
                f"condense: {self.kind.value} runs the modules its backup's head pins; "
                "--module is for genesis"
            )
        if self.kind is RequestKind.GENESIS:
            if self.backup is not None or self.backup_generation is not None:
                raise CondenseError(
                    "condense: genesis starts from nothing; drop --from-backup, or ask for "
                    "--evacuate or a restore"
                )
            return
        if self.backup is None or self.backup_generation is None:
            raise CondenseError(
                f"condense: {self.kind.value} starts from a backup set; pass --from-backup FILE"
            )
        if not GENESIS_GENERATION <= self.backup_generation < MAX_GENERATION:
            raise CondenseError(
                f"condense: backup generation {self.backup_generation} leaves no higher "
                "generation to claim"
            )


@attrs.frozen
class Step:
    """One step of a plan. ``zone`` for the per-zone steps; ``backup`` when durable state
    comes from a backup set; ``generation`` for the fence steps; ``modules`` for the
    modules a genesis node is to run (``NAME==VERSION``)."""

    kind: StepKind
    zone: str | None = None
    backup: str | None = None
    generation: int | None = None
    modules: tuple[str, ...] = ()

    def describe(self) -> str:
        words = self.kind.value.replace("_", " ")
        if self.zone is not None:
            words += f" {self.zone}"
        if self.backup is not None:
            words += f" from {self.backup}"
        if self.generation is not None:
            words += f" at generation {self.generation}"
        if self.modules:
            words += f" ({', '.join(self.modules)})"
        return words


Plan = tuple[Step, ...]


def plan_condense(request: CondenseRequest) -> Plan:
    """The ordered steps that bring a node up from ``request``'s starting point."""
    genesis = request.kind is RequestKind.GENESIS
    if genesis:
        fence = Step(StepKind.SEED_FENCE, generation=GENESIS_GENERATION)
    else:
        assert request.backup_generation is not None
        fence = Step(StepKind.CLAIM_FENCE, generation=request.backup_generation + 1)
    return (
        Step(StepKind.ASSESS_HOST),
        Step(
            StepKind.MATERIALISE_DURABLE_STATE,
            backup=request.backup,
            generation=GENESIS_GENERATION if genesis else request.backup_generation,
        ),
        Step(StepKind.CONDENSE_MODULES, modules=request.modules),
        Step(StepKind.RENDER_SITE_FACTS),
        *(Step(StepKind.PROVE_ZONE_SERVABLE, zone=zone) for zone in request.zones),
        *((Step(StepKind.PROVE_EDGE_SERVABLE),) if request.edge else ()),
        fence,
        Step(StepKind.START_UNIT),
        Step(StepKind.READ_BACK_READY),
        *(Step(StepKind.READ_BACK_APEX_SOA, zone=zone) for zone in request.zones),
    )


class CondenseHost(Protocol):
    """The host a plan runs against: one method per step kind, each raising on failure."""

    def assess_host(self, step: Step) -> None: ...
    def materialise_durable_state(self, step: Step) -> None: ...
    def condense_modules(self, step: Step) -> None: ...
    def render_site_facts(self, step: Step) -> None: ...
    def prove_zone_servable(self, step: Step) -> None: ...
    def prove_edge_servable(self, step: Step) -> None: ...
    def seed_fence(self, step: Step) -> None: ...
    def claim_fence(self, step: Step) -> None: ...
    def start_unit(self, step: Step) -> None: ...
    def read_back_ready(self, step: Step) -> None: ...
    def read_back_apex_soa(self, step: Step) -> None: ...


_RUN: dict[StepKind, Callable[[CondenseHost, Step], None]] = {
    StepKind.ASSESS_HOST: lambda host, step: host.assess_host(step),
    StepKind.MATERIALISE_DURABLE_STATE: lambda host, step: host.materialise_durable_state(step),
    StepKind.CONDENSE_MODULES: lambda host, step: host.condense_modules(step),
    StepKind.RENDER_SITE_FACTS: lambda host, step: host.render_site_facts(step),
    StepKind.PROVE_ZONE_SERVABLE: lambda host, step: host.prove_zone_servable(step),
    StepKind.PROVE_EDGE_SERVABLE: lambda host, step: host.prove_edge_servable(step),
    StepKind.SEED_FENCE: lambda host, step: host.seed_fence(step),
    StepKind.CLAIM_FENCE: lambda host, step: host.claim_fence(step),
    StepKind.START_UNIT: lambda host, step: host.start_unit(step),
    StepKind.READ_BACK_READY: lambda host, step: host.read_back_ready(step),
    StepKind.READ_BACK_APEX_SOA: lambda host, step: host.read_back_apex_soa(step),
}
"""Which ``CondenseHost`` method runs each step kind."""


class BackupOlderThanFence(CondenseError):
    """The fence moved past the backup set's head after it was taken (an evacuate or a
    restore since): restoring it would claim a generation another instance holds, so no
    run of this condense can finish; only a newer backup set can."""

    def __init__(self, backup_generation: int, fence: FenceState, clear_state: str) -> None:
        self.backup_generation = backup_generation
        self.fence = fence
        super().__init__(
            f"the backup set is older than the fence: it was taken at generation "
            f"{backup_generation}, and the fence has since moved to generation "
            f"{fence.generation}, held by {fence.holder} (this node was evacuated or "
            f"restored after the backup was taken), so restoring it would claim generation "
            f"{backup_generation + 1}, which is no longer free; restore from a backup set "
            f"taken at generation {fence.generation} on the holder ({fence.holder}; "
            "`valis backup create` there names the generation it is taken at, and "
            "`valis backup verify FILE` a set's), after clearing this state directory, "
            f"which now holds this older set: {clear_state}"
        )


class CondenseFailed(CondenseError):
    """A plan stopped at ``step``; ``completed`` ran before it, nothing after it ran."""

    def __init__(self, step: Step, number: int, plan: Plan, completed: Plan, cause: Exception):
        self.step = step
        self.completed = completed
        self.cause = cause
        started = any(done.kind is StepKind.START_UNIT for done in completed)
        consequence = (
            "the unit was started before this step and is left as it is"
            if started
            else "the unit was not started"
        )
        remedy = (
            "running it again cannot finish it: condense from the newer backup set"
            if isinstance(cause, BackupOlderThanFence)
            else "once the cause is mended, run the same condense again against the same "
            "state directory to finish"
        )
        super().__init__(
            f"condense: step {number}/{len(plan)} ({step.describe()}) failed: {cause}; "
            f"no later step ran and {consequence}; {remedy}"
        )


@attrs.frozen
class CondenseReport:
    """A plan run to its end: every step, in the order run."""

    completed: Plan


def execute_plan(plan: Plan, host: CondenseHost) -> CondenseReport:
    """Run ``plan`` step by step against ``host``; the first failure stops it.

    A step fails by raising an ``Exception``; it is re-raised as ``CondenseFailed`` naming
    the step. Cancellation and interrupts (``BaseException``) propagate untouched.
    """
    completed: list[Step] = []
    for number, step in enumerate(plan, start=1):
        try:
            _RUN[step.kind](host, step)
        except Exception as exc:
            raise CondenseFailed(step, number, plan, tuple(completed), exc) from exc
        completed.append(step)
    return CondenseReport(tuple(completed))


def condense_onto_host(request: CondenseRequest, host: CondenseHost) -> CondenseReport:
    """Plan ``request`` and run the plan against ``host``."""
    return execute_plan(plan_condense(request), host)
