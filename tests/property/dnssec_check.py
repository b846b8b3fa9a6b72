"""dnspython's DNSSEC validation for the tests: the independent judge of what is signed
(dnspython 2.9 enables ``dns.dnssec`` with cryptography 50 or later, which valis takes)."""

from __future__ import annotations

import dns.dnssec
import dns.message
import dns.name
import dns.node
import dns.rdataset
import dns.rdatatype
import dns.rrset


def validate(
    rrset: dns.rrset.RRset, sigs: dns.rrset.RRset,
    keys: dict[dns.name.Name, dns.rrset.RRset], *, now: float | None = None,
) -> None:
    """dnspython's ``validate``, but for an owner whose first label is a literal ``*``
    answered from a wildcard above it (``*.a`` from ``*``), which dnspython refuses ("wild
    owner name has wrong label length") where RFC 4035 section 5.3.2 has the validator
    reconstruct the wildcard from the RRSIG's Labels, as Unbound does: checked at that
    reconstructed name."""
    name = rrset.name
    judge: dict[dns.name.Name, dns.node.Node | dns.rdataset.Rdataset] = dict(keys)
    labels = min(rdata.labels for rdata in sigs)
    if name.is_wild() and labels < len(name) - 2:
        source = dns.name.from_text("*", dns.name.Name(name.labels[-(labels + 1):]))
        dns.dnssec.validate((source, rrset), (source, sigs), judge, now=now)
        return
    dns.dnssec.validate(rrset, sigs, judge, now=now)


def validate_sections(
    message: dns.message.Message, keys: dict[dns.name.Name, dns.rrset.RRset], *, now: float
) -> int:
    """Check that every RRset in the answer and authority sections (but NS at a
    delegation) has an RRSIG that verifies under ``keys``; return how many were checked."""
    checked = 0
    for section in (message.answer, message.authority):
        sigs = {
            (rrset.name, rrset.covers): rrset
            for rrset in section
            if rrset.rdtype == dns.rdatatype.RRSIG
        }
        for rrset in section:
            if rrset.rdtype == dns.rdatatype.RRSIG:
                continue
            if rrset.rdtype == dns.rdatatype.NS and (
                not message.flags & 0x0400
                or (section is message.authority and rrset.name not in keys)
            ):
                # A delegation's NS is the child's, never signed by the parent (RFC 4035
                # section 2.2): in a referral, or after a CNAME or DNAME led into one.
                continue
            if rrset.rdtype == dns.rdatatype.CNAME and _synthesized(section, rrset.name):
                continue  # a CNAME made from a DNAME is unsigned (RFC 6672 section 5.3.1)
            sig = sigs.get((rrset.name, rrset.rdtype))
            assert sig is not None, f"no RRSIG over {rrset.name} {rrset.rdtype!r}"
            validate(rrset, sig, keys, now=now)
            checked += 1
    return checked


def _synthesized(section: list[dns.rrset.RRset], name: dns.name.Name) -> bool:
    return any(
        rrset.rdtype == dns.rdatatype.DNAME and name.is_subdomain(rrset.name)
        and name != rrset.name
        for rrset in section
    )


def wildcard_answers_proven(message: dns.message.Message) -> int:
    """Check that every answer RRset synthesized from a wildcard (its RRSIG's Labels
    fewer than its owner's) carries an NSEC proving, as a validator reads it (RFC 4035
    section 5.3.4, and Unbound's ``val_nsec_proves_positive_wildcard``), that no nearer
    name matched: the NSEC covers the owner and its next closer name (the wildcard
    parent's child on the way to it), and the closest encloser its two ends give is the
    wildcard's parent. Return how many such answers were checked. The NSEC's own
    signature is ``validate_sections``' to check."""
    nsecs = [rrset for rrset in message.authority if rrset.rdtype == dns.rdatatype.NSEC]
    checked = 0
    for sig in message.answer:
        if sig.rdtype != dns.rdatatype.RRSIG:
            continue
        labels = min(rdata.labels for rdata in sig)
        owner = sig.name
        if labels >= len(owner) - 1 or owner.is_wild():
            continue  # not synthesized: the name's own data, or the wildcard asked itself
        parent = dns.name.Name(owner.labels[-(labels + 1):])
        nearer = dns.name.Name(owner.labels[-(labels + 2):])
        proofs = [nsec for nsec in nsecs if _covers(nsec, nearer) and _covers(nsec, owner)
                  and _encloser(nsec, owner) == parent]
        assert proofs, f"no NSEC proves {nearer} absent for {owner} from *.{parent}"
        checked += 1
    return checked


def _covers(nsec: dns.rrset.RRset, name: dns.name.Name) -> bool:
    nxt = next(iter(nsec)).next
    if name == nsec.name:
        return False
    if nsec.name < nxt:
        return bool(nsec.name < name < nxt)
    return bool(name > nsec.name or name < nxt)  # the last NSEC of the zone wraps


def _encloser(nsec: dns.rrset.RRset, name: dns.name.Name) -> dns.name.Name:
    """The closest encloser a validator reads from an NSEC covering ``name``: the longer
    of the names ``name`` shares with the NSEC's owner and with its next name."""
    nxt = next(iter(nsec)).next
    shared = [name.fullcompare(end)[2] for end in (nsec.name, nxt)]
    return dns.name.Name(name.labels[-max(shared):])
