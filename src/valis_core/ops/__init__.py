"""Operator verbs: assess, condense, backup.

The face: plan a condense (``plan_condense``, pure) and run it against a host of your own
(``execute_plan`` over a ``CondenseHost``); assess a host through a probe you pass in;
make, verify and restore backup sets.
"""

from valis_core.ops.backup import (
    BackupError,
    VerifiedBackup,
    create_backup,
    restore_backup,
    verify_backup_set,
)
from valis_core.ops.condense import (
    CondenseError,
    CondenseFailed,
    CondenseHost,
    CondenseReport,
    CondenseRequest,
    Plan,
    RequestKind,
    Step,
    StepKind,
    condense_onto_host,
    execute_plan,
    plan_condense,
)
from valis_core.ops.host_readiness import (
    AssessConfig,
    Assessment,
    Clause,
    HostProbe,
    assess_host,
)

__all__ = [
    "AssessConfig",
    "Assessment",
    "BackupError",
    "Clause",
    "CondenseError",
    "CondenseFailed",
    "CondenseHost",
    "CondenseReport",
    "CondenseRequest",
    "HostProbe",
    "Plan",
    "RequestKind",
    "Step",
    "StepKind",
    "VerifiedBackup",
    "assess_host",
    "condense_onto_host",
    "create_backup",
    "execute_plan",
    "plan_condense",
    "restore_backup",
    "verify_backup_set",
]
