"""Types of the compiled run of the zone check's loop over records (source: ``_check.c``)."""

def records_run(
    records: list[tuple[bytes, int, int, bytes]],
    positions: list[int],
    start: int,
    apex: bytes,
    nodes: dict[bytes, bytes],
    notable: set[bytes],
    more: dict[bytes, bytearray],
    servable: set[int],
    first: dict[bytes, int],
    second: dict[bytes, int],
    rrset: dict[tuple[bytes, int], tuple[int, int]],
    noted: dict[tuple[bytes, int, bytes], int],
    undotted: set[bytes],
    tlds: frozenset[str],
    /,
) -> int: ...

def clean_count(
    records: bytearray, arena: bytearray, apex: bytes, tlds: frozenset[str], /
) -> int: ...
