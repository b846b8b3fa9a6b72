"""The NSD configuration of one secondary: its TSIG keys and a ``zone:`` stanza for every
zone it is listed for, its own and its catalogs' members, transferring from and taking
NOTIFY from the node's addresses. NSD 4 has no catalog zones; an operator regenerates
this (``valis zone secondary nsd-conf``) and reloads NSD instead of editing it by hand.
A pure value: the shell reads the secondaries and writes the text.
"""

from __future__ import annotations

from collections.abc import Sequence

from valis_core.operator_state.secondaries import Secondary, SecondaryError


def nsd_conf(listed: Sequence[Secondary], address: str, primaries: Sequence[str]) -> str:
    """The ``key:`` and ``zone:`` sections for the secondary at ``address`` (canonical),
    of the secondaries ``listed``; ``primaries`` are the node's addresses (one at
    least). Refused when the secondary is listed nowhere or one key name stands for two
    secrets (NSD would take only one of them)."""
    mine = sorted((s for s in listed if s.address == address), key=lambda s: s.zone)
    if not mine:
        raise SecondaryError(
            f"no zone lists a secondary at {address} (valis zone secondary list shows "
            "which addresses are listed)"
        )
    if not primaries:
        raise SecondaryError("give the node's address (--primary ADDRESS) NSD transfers from")
    keys: dict[str, Secondary] = {}
    for secondary in mine:
        known = keys.setdefault(secondary.key_name, secondary)
        if (known.algorithm, known.secret) != (secondary.algorithm, secondary.secret):
            raise SecondaryError(
                f"the key {secondary.key_name} of the secondary at {address} has another "
                f"secret for {secondary.zone} than for {known.zone}; NSD takes one secret "
                "a key name: give the zones one key (valis zone secondary add --key-name)"
            )
    text = [f"# valis: the zones the secondary at {address} transfers; regenerate with\n"
            f"# valis zone secondary nsd-conf {address} --primary ...\n"]
    for name, key in sorted(keys.items()):
        text.append(f'key:\n    name: "{name}"\n    algorithm: {key.algorithm}\n'
                    f'    secret: "{key.secret_base64}"\n')
    for secondary in mine:
        lines = [f'zone:\n    name: "{secondary.zone}"\n    zonefile: "{secondary.zone}zone"\n']
        for primary in primaries:
            lines.append(f"    request-xfr: {primary} {secondary.key_name}\n"
                         f"    allow-notify: {primary} {secondary.key_name}\n")
        text.append("".join(lines))
    return "".join(text)
