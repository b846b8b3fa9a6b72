"""Site facts on disk: the rendered environment file written atomically (the IO shell
around ``site_facts``, which renders and parses). The operator-state DSN they name is
checked here too (a socket under peer authentication: ``operator_state.dsn``), since
judging it needs libpq's parser, which the pure core does not load."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from valis_core.atomic import write_atomic
from valis_core.operator_state.dsn import check_operator_dsn
from valis_core.operator_state.site_facts import (
    DSN_KEY,
    HEADER,
    SITE_FACTS_MODE,
    SiteFactsError,
    render_site_facts,
)


def write_site_facts(
    path: Path, facts: Mapping[str, str], *, mode: int = SITE_FACTS_MODE, header: str = HEADER
) -> None:
    """Render ``facts`` and write them to ``path`` atomically; refuse before touching disk."""
    data = render_site_facts(facts, header).encode("utf-8")
    check_operator_dsn(facts[DSN_KEY], source=f"site facts: {DSN_KEY}")
    try:
        write_atomic(path, data, mode=mode)
    except OSError as exc:
        raise SiteFactsError(
            f"site facts: cannot write {path}: {exc.strerror or exc} "
            "(check the directory exists and is writable)"
        ) from exc
