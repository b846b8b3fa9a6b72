"""The launcher's own refusals.

Every failure fulcrum can meet while preparing, running or tearing down a unit surfaces
as a ``LauncherError``: one line naming the stage, the object and what to do about it,
never a netlink or subprocess traceback.
"""

from __future__ import annotations

from valis_core.errors import ValisError


class LauncherError(ValisError):
    """A launch stage failed; the message names the stage, the object and the remedy."""
