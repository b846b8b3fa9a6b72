"""The numbers of the record types a master file's plain lines hold (RFC 1035, 3596,
2782), as plain ints with no import behind them.

``records`` declares every other type's number from dnspython's enums and re-exports
these; they live apart so that the master reader, and ``valis zone check`` of a plain
zone through it, import neither dnspython nor attrs (a command's start-up is most of its
time on a small file). ``tests/property/test_plain_types.py`` holds them to dnspython's.
"""

from __future__ import annotations

A = 1
NS = 2
CNAME = 5
SOA = 6
PTR = 12
MX = 15
TXT = 16
AAAA = 28
SRV = 33
