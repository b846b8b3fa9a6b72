"""How the resident's log lines look: a level on every line, text or one JSON object.

Text lines read ``valis resident: <level>: <message>``. Under journald (``JOURNAL_STREAM``
names the stream stderr is) the journal stamps the time itself and reads the level from
a ``<N>`` syslog prefix, so a line carries that prefix and no timestamp; anywhere else it
starts with an ISO 8601 UTC timestamp. ``json`` is one object per line (``level``,
``logger``, ``message``, and ``time`` when not under journald) for collectors such as
Loki; ``json.dumps`` escapes line breaks, so a message can never split a line. Under
journald a JSON line carries the ``<N>`` prefix too (the journal strips it, keeping the
priority, and stores the object alone as the message).

The format comes from ``--log-format`` on the resident's argv, else the site fact
``VALIS_LOG_FORMAT``, else text.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from valis_core.launch import parse_launch_argv
from valis_core.operator_state.site_facts import LOG_FORMATS

_PREFIX = "valis resident"
#: syslog priorities journald reads from a ``<N>`` prefix
_PRIORITY = {"DEBUG": 7, "INFO": 6, "WARNING": 4, "ERROR": 3, "CRITICAL": 2}


def log_format_argument(argv: Sequence[str]) -> str | None:
    """The value of ``--log-format`` in the launch argv ``argv``, as the launch record
    reads it; a format this resident does not know is ignored here (the site fact or
    text applies)."""
    chosen = parse_launch_argv(argv).log_format
    return chosen if chosen in LOG_FORMATS else None


def under_journald(environ: Mapping[str, str], stream_fd: int = 2) -> bool:
    """Whether ``stream_fd`` is the journal stream systemd named in ``JOURNAL_STREAM``."""
    named = environ.get("JOURNAL_STREAM", "")
    device, sep, inode = named.partition(":")
    if not sep:
        return False
    try:
        st = os.fstat(stream_fd)
    except OSError:
        return False
    return f"{st.st_dev}:{st.st_ino}" == f"{device}:{inode}"


def _priority(record: logging.LogRecord) -> int:
    return _PRIORITY.get(record.levelname, 6)


def _timestamp(record: logging.LogRecord) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``[time ]valis resident: <level>: <message>``, or ``<N>`` first under journald."""

    def __init__(self, *, journald: bool) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_PREFIX}: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if self.journald:
            return f"<{_priority(record)}>{text}"
        return f"{_timestamp(record)} {text}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def __init__(self, *, journald: bool) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {}
        if not self.journald:
            document["time"] = _timestamp(record)
        document["level"] = record.levelname.lower()
        document["logger"] = record.name
        document["message"] = record.getMessage()
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        line = json.dumps(document, ensure_ascii=False)
        if self.journald:
            return f"<{_priority(record)}>{line}"
        return line


def make_formatter(fmt: str, *, journald: bool) -> logging.Formatter:
    return JsonFormatter(journald=journald) if fmt == "json" else TextFormatter(journald=journald)


def configure_logging(
    level: str = "info", fmt: str = "text", environ: Mapping[str, str] | None = None
) -> None:
    """Send the resident's records to stderr at ``level`` in ``fmt``; called again (at the
    config store, on a reload) it changes the one handler rather than adding another."""
    journald = under_journald(os.environ if environ is None else environ)
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "_valis_resident", False)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler._valis_resident = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    handler.setFormatter(make_formatter(fmt, journald=journald))
    root.setLevel(level.upper())
