"""What fulcrum runs, as one digest: ``fulcrum fingerprint``.

A frozen build is one program for ``valis`` and ``fulcrum`` alike (the code of both is in
it), so the program's sha256 changes with every change to either. What decides whether a
delivery can be handed over to without restarting the unit is whether *fulcrum* would
run other code: the digest of the code of every module loaded once fulcrum's commands
are imported (its own, the library's it uses, the third-party and standard modules under
them), each module's code objects taken without their file names and line numbers, so
the same code staged at another path digests the same. ``valis apply`` asks the staged
version's program and the serving version's, and compares (``valis_core.apply.change``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types

#: What fulcrum runs: importing these loads every module it can use.
ENTRY_MODULES: tuple[str, ...] = (
    "fulcrum.main",
    "fulcrum.launch",
    "fulcrum.handover",
    "fulcrum.commands.config",
    "fulcrum.commands.launch",
    "fulcrum.commands.handover",
)


def fingerprint() -> str:
    """The sha256 of the code fulcrum runs, as hex."""
    for name in ENTRY_MODULES:
        importlib.import_module(name)
    digest = hashlib.sha256()
    for name in sorted(sys.modules):
        code = _code_of(name)
        if code is None:
            continue
        digest.update(name.encode() + b"\0")
        _feed(digest, code)
    return digest.hexdigest()


def _code_of(name: str) -> types.CodeType | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    loader = None if spec is None else spec.loader
    get_code = getattr(loader, "get_code", None)
    if get_code is None:
        return None
    try:
        code = get_code(name)
    except (ImportError, OSError, SyntaxError):
        return None
    return code if isinstance(code, types.CodeType) else None


def _feed(digest: hashlib._Hash, code: types.CodeType) -> None:
    for part in (code.co_code, code.co_exceptiontable, repr(code.co_names).encode(),
                 repr(code.co_varnames).encode(), repr(code.co_freevars).encode(),
                 repr(code.co_cellvars).encode(), code.co_qualname.encode(),
                 repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                       code.co_flags)).encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    for const in code.co_consts:
        _feed_const(digest, const)


def _feed_const(digest: hashlib._Hash, const: object) -> None:
    if isinstance(const, types.CodeType):
        _feed(digest, const)
        return
    if isinstance(const, tuple):
        digest.update(b"(" + len(const).to_bytes(8, "big"))
        for item in const:
            _feed_const(digest, item)
        return
    if isinstance(const, frozenset):  # its repr's order follows string hashing: random
        text = repr(sorted(repr(item) for item in const)).encode()
    else:
        text = repr(const).encode()
    digest.update(len(text).to_bytes(8, "big") + text)
