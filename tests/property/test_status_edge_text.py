"""``valis status``'s text shows the edge's certificate and ACME state as ``--json`` does:
both are read from the one status document, and every part of its ``edge`` that the
resident reported is in the text."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from valis_cli.commands.status import render_status
from valis_core.edge.stats import AcmeStatus
from valis_core.resident.status_document import STATUS, EdgeStatus, NodeStatus

NOW = 1_800_000_000.0
counts = st.one_of(st.none(), st.integers(0, 10**9))
moments = st.one_of(st.none(), st.floats(NOW - 86400 * 400, NOW + 86400 * 400))
texts = st.one_of(st.none(), st.text("abcdefghijklmnopqrstuvwxyz.:/-", min_size=1,
                                     max_size=30))
acmes = st.one_of(st.none(), st.builds(
    AcmeStatus, domain=texts, directory_url=texts, orders=counts, failures_in_a_row=counts,
    last_error=texts, last_step=texts, next_attempt=moments))
edges = st.builds(EdgeStatus, certificate_not_after=moments, connections=counts,
                  handshakes_failed=counts, displaced=counts, responses=counts, acme=acmes)


def iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


@given(edges)
def test_every_part_of_the_edge_the_json_reports_is_in_the_text(edge: EdgeStatus) -> None:
    document = STATUS.unstructure(NodeStatus(node="ns1", location="lab", edge=edge))
    status = STATUS.structure(document)  # what valis status reads, for either output
    text = render_status(status, NOW)
    (line, *acme_lines) = [row for row in text.splitlines()
                           if row.startswith(("edge: ", "acme: "))]
    assert line.startswith("edge: ")
    expiry = document["edge"].get("certificate_not_after")
    if expiry is None:
        assert "no certificate served yet" in line
    else:
        assert iso(expiry) in line
        assert ("EXPIRED" in line) == (expiry <= NOW)
    for key, what in (("connections", "connections"), ("handshakes_failed", "handshakes "
                      "failed"), ("displaced", "displaced"), ("responses", "responses")):
        if document["edge"].get(key) is not None:
            assert f"{what} {document['edge'][key]}" in line
    acme = document["edge"].get("acme")
    assert len(acme_lines) == (acme is not None)
    if acme is not None:
        (shown,) = acme_lines
        for key, value in acme.items():
            if value is not None:
                assert (iso(value) if key == "next_attempt" else str(value)) in shown, key


def test_a_node_without_an_edge_shows_no_edge_lines() -> None:
    text = render_status(NodeStatus(node="ns1", location="lab"), NOW)
    assert not [row for row in text.splitlines() if row.startswith(("edge:", "acme:"))]
