"""The root of every error an operator may see.

The CLI turns any ``ValisError`` into one line on stderr and a non-zero exit, so each
subclass's message must say what went wrong, on which object, and what to do about it.
"""


class ValisError(Exception):
    """An error whose message is fit to show an operator as-is."""

    #: the process's exit status when this error ends it (one that a supervisor must
    #: tell apart from any other failure sets its own)
    exit_status: int = 1
