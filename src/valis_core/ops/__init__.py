"""Operator verbs: assess, condense, backup.

The face: plan a condense (``plan_condense``, pure) and run it against a host of your own
(``execute_plan`` over a ``CondenseHost``); assess a host through a probe you pass in;
make, verify and restore backup sets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.ops.assessment import AssessConfig, Assessment, Clause
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
    from valis_core.ops.host_probe import HostProbe
    from valis_core.ops.host_readiness import assess_host

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

__getattr__ = lazy_attributes(
    __name__,
    {
        "AssessConfig": "valis_core.ops.assessment",
        "Assessment": "valis_core.ops.assessment",
        "BackupError": "valis_core.ops.backup",
        "Clause": "valis_core.ops.assessment",
        "CondenseError": "valis_core.ops.condense",
        "CondenseFailed": "valis_core.ops.condense",
        "CondenseHost": "valis_core.ops.condense",
        "CondenseReport": "valis_core.ops.condense",
        "CondenseRequest": "valis_core.ops.condense",
        "HostProbe": "valis_core.ops.host_probe",
        "Plan": "valis_core.ops.condense",
        "RequestKind": "valis_core.ops.condense",
        "Step": "valis_core.ops.condense",
        "StepKind": "valis_core.ops.condense",
        "VerifiedBackup": "valis_core.ops.backup",
        "assess_host": "valis_core.ops.host_readiness",
        "condense_onto_host": "valis_core.ops.condense",
        "create_backup": "valis_core.ops.backup",
        "execute_plan": "valis_core.ops.condense",
        "plan_condense": "valis_core.ops.condense",
        "restore_backup": "valis_core.ops.backup",
        "verify_backup_set": "valis_core.ops.backup",
    },
)
