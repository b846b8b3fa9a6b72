"""Types of the compiled lines of the master reader's plain path (source: ``_master.c``)."""

from collections.abc import Callable

def plain_lines(
    lines: list[str],
    start: int,
    stop: int,
    origin: bytes,
    last_owner: bytes | None,
    implicit: int | None,
    follows: bool,
    emit: Callable[[tuple[bytes, int, int, bytes]], object],
    positions: list[int] | Callable[[int], object] | None,
    /,
) -> tuple[int, bytes | None, int | None]: ...

class RecordTable:
    """Records read from a master file, kept in C memory (``_record_table.h``)."""

    records: bytearray
    arena: bytearray
    def append(self, record: tuple[bytes, int, int, bytes], /) -> None: ...
    def set_line(self, line: int, /) -> None: ...
    def rows(self) -> tuple[list[tuple[bytes, int, int, bytes]], list[int]]: ...
    def __len__(self) -> int: ...
