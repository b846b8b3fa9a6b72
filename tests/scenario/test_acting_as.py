"""Root acting as the run account: the kernel holds it to what the account may do."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.module_dist import HELLO, hello_wheel, pin_of, publish
from tests.scenario.pg import RUN_USER, ensure_system_user
from valis_core.acting_as import acting_as
from valis_core.plugin.install import ModuleInstallError, condense_modules
from valis_core.plugin.installed import modules_dir


def _account() -> tuple[int, int]:
    require_root()
    account = ensure_system_user(RUN_USER)
    return account.pw_uid, account.pw_gid


def test_what_is_made_is_the_accounts_and_root_is_taken_back(run_account_dir: Path) -> None:
    account = _account()
    home = run_account_dir / "home"
    home.mkdir(mode=0o700)
    os.chown(home, *account)
    with acting_as(account):
        assert (os.geteuid(), os.getegid()) == account
        (home / "made").write_text("x")
    assert (os.geteuid(), os.getegid()) == (0, 0)
    made = (home / "made").stat()
    assert (made.st_uid, made.st_gid) == account


def test_a_directory_the_account_does_not_own_is_closed_to_it(run_account_dir: Path) -> None:
    account = _account()
    closed = run_account_dir / "closed"
    closed.mkdir(mode=0o755)
    with acting_as(account), pytest.raises(PermissionError):
        (closed / "made").write_text("x")
    assert not (closed / "made").exists()
    assert os.geteuid() == 0


def test_modules_are_written_as_the_run_account_and_refused_where_it_cannot_write(
    run_account_dir: Path,
) -> None:
    account = _account()
    wheel = hello_wheel()
    url = publish(run_account_dir / "wh", wheel)
    state = run_account_dir / "state"
    state.mkdir(mode=0o700)
    os.chown(state, *account)
    installed = condense_modules(state, [pin_of(HELLO, "1.0", wheel)], url, owner=account)
    for path in (installed, installed / "valis_hello" / "__init__.py"):
        assert pwd.getpwuid(path.stat().st_uid).pw_name == RUN_USER

    roots = run_account_dir / "roots"
    roots.mkdir(mode=0o700)
    with pytest.raises(ModuleInstallError, match="as the run account: Permission denied"):
        condense_modules(roots, [pin_of(HELLO, "1.0", wheel)], url, owner=account)
    assert not modules_dir(roots).exists()
