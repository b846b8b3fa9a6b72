"""Types of the compiled A lines of the master reader's plain path (source: ``_master.c``)."""

from collections.abc import Callable

def a_lines(
    lines: list[str],
    start: int,
    stop: int,
    origin: bytes,
    implicit: int | None,
    follows: bool,
    emit: Callable[[tuple[bytes, int, int, bytes]], object],
    positions: list[int] | None,
    /,
) -> tuple[int, bytes | None, int | None]: ...
