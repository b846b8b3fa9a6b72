"""Types of the compiled run of the zone check's loop over records (source: ``_check.c``)."""

def first_records(
    records: list[tuple[bytes, int, int, bytes]],
    start: int,
    apex: bytes,
    nodes: dict[bytes, bytes],
    notable: set[bytes],
    servable: set[int],
    first: dict[bytes, int],
    tlds: frozenset[str],
    /,
) -> int: ...
