"""dnspython's DNSSEC validation for the tests: the independent judge of what is signed.

dnspython 2.9 enables ``dns.dnssec`` only with cryptography 50 or later, and valis pins
cryptography below 50; the parts used here (ECDSA P-256 and Ed25519 verification) are
the same in 49, so the feature is switched on and the module loaded again with it.
"""

from __future__ import annotations

import importlib

import dns._features
import dns.dnssec
import dns.message
import dns.name
import dns.rdatatype
import dns.rrset

dns._features.force("dnssec", True)
importlib.reload(dns.dnssec)

validate = dns.dnssec.validate


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
            if rrset.rdtype == dns.rdatatype.NS and not message.flags & 0x0400:
                continue  # a referral's NS is the child's, never signed by the parent
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
