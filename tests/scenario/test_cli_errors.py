"""An operator who gets something wrong gets one line saying what and what to do, never a
traceback: every verb of ``valis`` and ``fulcrum``, found by walking their parsers (a new
verb is walked without touching this file), is run with missing files, a directory it
cannot write, a database never migrated, a database that is not running and an empty
DSN, as the unprivileged run account."""

from __future__ import annotations

import argparse
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from fulcrum.main import COMMAND_MODULES as FULCRUM_MODULES
from tests.scenario.pg import RUN_USER, PgCluster, runtime_bin
from valis_cli.main import COMMAND_MODULES as VALIS_MODULES
from valis_core import __version__
from valis_core.command_line import build_parser

PROGRAMS = {"valis": VALIS_MODULES, "fulcrum": FULCRUM_MODULES}
RUN_TIMEOUT = 30.0
PARALLEL = 4
TIMED_OUT = -999

# Options whose value is a file or directory to read or write, by their dest.
PATH_DESTS = {
    "file", "zone", "zones", "out", "delivery", "archive", "wheelhouse", "state_dir",
    "config", "path", "site_facts", "from_backup", "cache_dir", "dist_home",
    "launcher_config", "root",
}
# Of those, the optional ones the walk gives anyway (their default is the node's own).
OPTIONAL_PATHS = {"state_dir", "cache_dir", "site_facts", "out", "config"}
# Of those, the ones a verb only reads: given a good zone file where a scenario breaks
# only what a verb writes.
READ_DESTS = {"zone", "zones", "file"}
# Values for everything else a verb requires, by dest.
PLAIN_VALUES = {
    "url": "file:///nonexistent/simple/",
    "node": "node-a",
    "dns_address": "127.0.0.1:5399",
    "unit_command": "/bin/false",
    "policy": "increment",
}


# The seam is the socket under peer authentication: these are refused before connecting.
PASSWORD_DSN = "postgresql://valis:hunter2@/valis_state?host=/var/run/postgresql"
TCP_DSN = "postgresql://valis@192.0.2.5:5432/valis_state"


@attrs.frozen
class Verb:
    program: str
    words: tuple[str, ...]
    parser: argparse.ArgumentParser

    @property
    def name(self) -> str:
        return " ".join((self.program, *self.words))


def _leaves(
    program: str, words: tuple[str, ...], parser: argparse.ArgumentParser
) -> Iterator[Verb]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield Verb(program, words, parser)
        return
    for name, child in subs[0].choices.items():
        yield from _leaves(program, (*words, name), child)


def all_verbs() -> list[Verb]:
    verbs: list[Verb] = []
    for program, modules in PROGRAMS.items():
        verbs += _leaves(program, (), build_parser(program, "", modules, __version__))
    return verbs


@attrs.frozen
class Scenario:
    """What is wrong: the value every path-like option gets, and every ``--dsn``."""

    name: str
    path: str | None
    dsn: str | None
    makes_output: bool = False
    remedies: frozenset[str] = frozenset()
    """Verbs that are this scenario's remedy rather than its victim."""
    alone: bool = False
    """Whether what it breaks is state a verb could change (a database), so its runs are
    not mixed with another scenario's; the others break what no verb mends."""

    def argv(self, verb: Verb, good_zone: Path) -> list[str] | None:
        """The verb's command line in this scenario; None when it has nothing to break."""
        if verb.name in self.remedies:
            return None
        argv = [verb.program, *verb.words]
        touched = False
        groups_done: set[int] = set()
        for group in verb.parser._mutually_exclusive_groups:
            if group.required:
                first = group._group_actions[0]
                groups_done.update(id(a) for a in group._group_actions)
                argv += self._fill(first, good_zone)
        for action in verb.parser._actions:
            if id(action) in groups_done or isinstance(action, argparse._HelpAction):
                continue
            if action.dest == "dsn" and self.dsn is not None:
                argv += ["--dsn", self.dsn]
                touched = True
            elif action.dest in PATH_DESTS and self.path is not None and (
                action.required or not action.option_strings or action.dest in OPTIONAL_PATHS
            ):
                argv += self._fill(action, good_zone)
                touched = touched or not self._reads(action)
            elif action.required or (not action.option_strings and action.nargs is None):
                argv += self._fill(action, good_zone)
                touched = touched or (
                    action.dest in PATH_DESTS and self.path is not None
                    and not self._reads(action)
                )
        return argv if touched else None

    def _reads(self, action: argparse.Action) -> bool:
        """Whether this scenario gives ``action`` the good zone file to read."""
        return self.makes_output and action.dest in READ_DESTS

    def _fill(self, action: argparse.Action, good_zone: Path) -> list[str]:
        if action.nargs == 0:
            return [action.option_strings[0]]
        if action.dest in PATH_DESTS and self.path is not None:
            value = self.path
            if self._reads(action):
                value = str(good_zone)
        elif action.dest in PATH_DESTS:
            value = str(good_zone)
        else:
            value = PLAIN_VALUES.get(action.dest, "example.test.")
        return [*action.option_strings[:1], value]


@attrs.frozen
class Outcome:
    scenario: str
    argv: tuple[str, ...]
    status: int
    stderr: str
    stdout: str


async def run_as_run_account(scenario: str, argv: list[str], cwd: Path) -> Outcome:
    account = pwd.getpwnam(RUN_USER)
    bin_dir = runtime_bin()
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(cwd),
        "LC_ALL": "C.UTF-8",
        "XDG_CACHE_HOME": str(cwd / "cache"),
    }
    command = [str(bin_dir / argv[0]), *argv[1:]]
    with trio.move_on_after(RUN_TIMEOUT):
        done = await trio.run_process(
            ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
             "--init-groups", "--", *command],
            capture_stdout=True, capture_stderr=True, check=False, env=env, cwd=str(cwd),
            stdin=b"",
        )
        return Outcome(
            scenario, tuple(argv), done.returncode, done.stderr.decode("utf-8", "replace"),
            done.stdout.decode("utf-8", "replace"),
        )
    return Outcome(scenario, tuple(argv), TIMED_OUT, "", "")


async def run_all(runs: list[tuple[str, list[str]]], cwd: Path) -> list[Outcome]:
    """Every (scenario, command line) of ``runs``, ``PARALLEL`` at a time."""
    outcomes: list[Outcome] = []
    limiter = trio.CapacityLimiter(PARALLEL)

    async def one(scenario: str, argv: list[str]) -> None:
        async with limiter:
            outcomes.append(await run_as_run_account(scenario, argv, cwd))

    async with trio.open_nursery() as nursery:
        for scenario, argv in runs:
            nursery.start_soon(one, scenario, argv)
    return outcomes


def _problems(outcome: Outcome) -> list[str]:
    """What is wrong with how the verb failed (empty: it failed as an operator expects)."""
    shown = f"[{outcome.scenario}] {' '.join(outcome.argv)}"
    problems = []
    if outcome.status == TIMED_OUT:
        problems.append(f"{shown}: still running after {RUN_TIMEOUT:g} s")
    elif "Traceback" in outcome.stderr:
        problems.append(f"{shown}: a traceback:\n{outcome.stderr}")
    elif outcome.status != 0:
        lines = outcome.stderr.splitlines()
        report_on_stdout = not lines and outcome.stdout.strip()
        if not report_on_stdout and len(lines) != 1:
            problems.append(f"{shown}: exit {outcome.status}, stderr not one line:\n"
                            f"{outcome.stderr}")
    return problems


@pytest.fixture
def walk_dir(run_account_dir: Path) -> Path:
    """The run account's scratch: a good zone file, and ``ro``, a directory it cannot
    write (root owns it)."""
    zone = run_account_dir / "example.test.zone"
    zone.write_text(
        "$ORIGIN example.test.\n@ 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n"
        "@ 3600 IN NS ns1\nns1 3600 IN A 192.0.2.53\n"
    )
    os.chmod(zone, 0o644)
    readonly = run_account_dir / "ro"
    readonly.mkdir(mode=0o755)
    (run_account_dir / "nosocket").mkdir(mode=0o755)
    return run_account_dir


def scenarios(walk_dir: Path, unmigrated_dsn: str) -> list[Scenario]:
    stopped = f"postgresql://{RUN_USER}@/valis_state?host={walk_dir / 'nosocket'}"
    return [
        Scenario("missing files", str(walk_dir / "missing" / "nothing-here"), stopped),
        Scenario("unwritable directory", str(walk_dir / "ro" / "out"), None, makes_output=True),
        Scenario("unmigrated database", None, unmigrated_dsn,
                 remedies=frozenset({"valis db migrate"}), alone=True),
        Scenario("stopped database", None, stopped),
        Scenario("empty DSN", None, ""),
        # One refused DSN walks every verb (a TCP host takes the same path: see below).
        Scenario("DSN with a password", None, PASSWORD_DSN),
    ]


def test_the_walk_finds_every_verb_of_both_programs() -> None:
    names = {verb.name for verb in all_verbs()}
    assert {"valis zone import", "valis site-facts render", "valis condense",
            "valis dist index", "valis demo", "valis status", "fulcrum config produce",
            "fulcrum launch"} <= names


async def test_no_verb_shows_a_traceback_whatever_is_wrong(
    walk_dir: Path, pg_cluster: PgCluster
) -> None:
    unmigrated = pg_cluster.new_database("unmigrated")
    good_zone = walk_dir / "example.test.zone"
    every = scenarios(walk_dir, unmigrated)
    # A scenario that breaks changeable state runs alone; the rest run together, their
    # broken things being distinct and beyond any verb's mending.
    groups = [[s for s in every if not s.alone], *([s] for s in every if s.alone)]
    runs = [
        [(scenario.name, argv) for scenario in group for verb in all_verbs()
         if (argv := scenario.argv(verb, good_zone)) is not None]
        for group in groups
    ]
    assert sum(len(group) for group in runs) > 40
    outcomes: list[Outcome] = []
    for group_runs in runs:
        outcomes += await run_all(group_runs, walk_dir)
    problems = [problem for outcome in outcomes for problem in _problems(outcome)]
    assert not problems, "\n\n".join(problems)


def test_a_dsn_with_a_password_or_a_tcp_host_is_refused_in_one_line_wherever_it_comes_from(
    tmp_path: Path,
) -> None:
    valis = Path(sys.executable).with_name("valis")
    store = tmp_path / "state" / "config" / "site-facts.env"
    store.parent.mkdir(parents=True)
    store.write_text(
        'VALIS_NODE_NAME=node-a\nVALIS_LOCATION=here\nVALIS_SERVED_ZONES=example.test.\n'
        'VALIS_OPERATOR_STATE_DSN="postgresql://valis@db.example/valis_state"\n'
    )
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"}
    cases = [
        (["--dsn", PASSWORD_DSN], env,
         "valis: --dsn: DSN refused: it carries a password (password); "),
        ([], {**env, "VALIS_OPERATOR_STATE_DSN": TCP_DSN},
         "valis: $VALIS_OPERATOR_STATE_DSN: DSN refused: it names the TCP host '192.0.2.5' "
         "with no sslmode; "),
        (["--state-dir", str(tmp_path / "state")], env,
         f"valis: VALIS_OPERATOR_STATE_DSN in the site facts {store}: DSN refused: it names "
         "the TCP host 'db.example' with no sslmode; "),
    ]
    for extra, environ, expected in cases:
        done = subprocess.run(
            [str(valis), "zone", "list", *extra], env=environ, capture_output=True,
            text=True, timeout=RUN_TIMEOUT, check=False, stdin=subprocess.DEVNULL,
        )
        assert done.returncode != 0
        assert done.stderr.startswith(expected), done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert "hunter2" not in done.stderr
