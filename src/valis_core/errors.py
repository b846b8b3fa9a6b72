"""The root of every error an operator may see.

The CLI turns any ``ValisError`` into one line on stderr and a non-zero exit, so each
subclass's message must say what went wrong, on which object, and what to do about it.
"""


class ValisError(Exception):
    """An error whose message is fit to show an operator as-is."""

    #: the process's exit status when this error ends it (one that a supervisor must
    #: tell apart from any other failure sets its own)
    exit_status: int = 1


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (a database's is often several), for a log line
    or a status field; its type's name when it has none."""
    return " ".join(str(exc).split()) or type(exc).__name__
