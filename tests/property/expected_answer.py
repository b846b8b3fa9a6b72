"""What a test expects of a response, said as record lines: ``expect`` compares a
response's RCODE, AA and each section with the lines given (order and the case of names
aside), ``lines`` and ``norm`` put a section and a line in that one comparable form."""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rcode
import dns.rrset


def norm(line: str) -> str:
    """One record as text, names lowercased (names compare case-insensitively)."""
    owner, ttl, rdclass, rtype, rdata = line.split(" ", 4)
    rtype = rtype.upper()
    return " ".join((owner.lower(), ttl, rdclass.upper(), rtype,
                     rdata if rtype == "TXT" else rdata.lower()))


def lines(section: list[dns.rrset.RRset]) -> list[str]:
    return sorted(norm(line) for rrset in section for line in rrset.to_text().splitlines())


def expect(
    response: dns.message.Message,
    *,
    rcode: int = dns.rcode.NOERROR,
    aa: bool = True,
    answer: tuple[str, ...] = (),
    authority: tuple[str, ...] = (),
    additional: tuple[str, ...] = (),
) -> None:
    assert response.rcode() == rcode
    assert bool(response.flags & dns.flags.AA) is aa
    assert not response.flags & dns.flags.TC
    assert lines(response.answer) == sorted(map(norm, answer))
    assert lines(response.authority) == sorted(map(norm, authority))
    assert lines(response.additional) == sorted(map(norm, additional))
