"""The serving binary ``make build`` freezes and the delivery ``make dist`` stages.

The bundle is built once per session (``scripts/build``, the command ``make build``
runs) into a directory under /tmp, outside the checkout (``frozen_build``, shared with
the scenarios under a real systemd). Where it matters that nothing
is resolved on the host, the frozen program runs in a sandbox: a mount namespace in
which the checkout, the virtual environment, Debian's Python standard library and
site-packages are empty directories and ``libpython`` is ``/dev/null``, with an empty
environment (``env -i``), as the ``valis`` run account.

Contract §5.1: whether a node can load a module is decided when the binary is built. A
module installed into a state directory's ``modules`` is loaded by the frozen resident;
the known-bad control (``scripts/build --control``: only what the entry points import,
no distribution metadata) fails that same load, and refuses the module's requirements.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from tests.conftest import require_root
from tests.scenario.frozen_build import REPO, RUN_TIMEOUT, VERSION, PlainBuild, dist
from tests.scenario.loopback_serve import free_port
from tests.scenario.module_dist import hello_wheel, pin_of, publish
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, EXAMPLE_ZONE, import_zone
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import UNIT_IP, Ground, dig, netns_names, unit_config_text
from tests.scenario.resident_harness import Harness, make_state_dir, site_facts
from tests.unit_files import FULCRUM_UNIT, UNITS, only, parse_unit
from valis_cli.commands.apply import DEFAULT_ROOT
from valis_core.acting_as import acting_as
from valis_core.apply.delivery import (
    CURRENT_LINK,
    assert_delivery_sound,
    stage_delivery,
    switch_current,
)
from valis_core.atomic import write_atomic
from valis_core.operator_state.schema import migrate
from valis_core.plugin.install import condense_modules
from valis_core.plugin.wheel import make_wheel
from valis_core.store.head import head_path
from valis_core.store.manifest import Manifest, dumps

ZONE = "example.test."
WWW = "www IN A 192.0.2.80\n"
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# A module reaching past what the entry points import: dnspython's DNSSEC and TSIG key
# ring, cryptography's Fernet, and the distribution metadata of the runtime it runs in.
REACH = "valis-reach"
REACH_SOURCE = b'''
"""Leaves in the state directory what it could import and what metadata it could read."""
import importlib.metadata
import json

import cryptography.fernet
import dns.dnssec
import dns.tsigkeyring
import trio

from valis_core.plugin.install import runtime_versions


class Reach:
    def __init__(self, context):
        self.context = context

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
        report = {
            "trio": importlib.metadata.version("trio"),
            "dnspython": importlib.metadata.version("dnspython"),
            "runtime": sorted(runtime_versions()),
            "node": self.context.node,
        }
        (self.context.state_dir / "reach.started").write_text(json.dumps(report))
        task_status.started()
        await trio.sleep_forever()

    async def drain(self):
        (self.context.state_dir / "reach.drained").write_text("drained\\n")


def make(context):
    return Reach(context)
'''


def reach_wheel() -> tuple[str, bytes]:
    return make_wheel(
        REACH, "1.0", [("valis_reach/__init__.py", REACH_SOURCE)],
        requires=["trio>=0.25", "dnspython>=2.6"],
        entry_points="[valis.modules]\nreach = valis_reach:make\n",
    )


def _hidden_paths() -> tuple[list[Path], list[Path]]:
    """Directories and files through which the host's Python could reach the program."""
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    directories = {REPO, Path(sys.prefix), Path(base["stdlib"]), Path(base["platstdlib"]),
                   Path("/usr/lib/python3"), *Path("/usr/local/lib").glob("python3*")}
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/usr/lib")
    files = sorted(libdir.glob("libpython3*.so*")) + sorted(
        Path("/usr/lib").glob("*/libpython3*.so*")
    )
    existing = {d.resolve() for d in directories if d.is_dir()}
    # A directory inside another hidden one is hidden with it (and could not be mounted on).
    found = sorted(d for d in existing if not any(d != o and d.is_relative_to(o) for o in existing))
    return found, sorted({f.resolve() for f in files if f.is_file()})


def sandboxed(argv: Sequence[str], *, as_run_account: bool = True) -> list[str]:
    """``argv`` in a mount namespace where the host's Python, the checkout and the venv
    are hidden, with an empty environment (only a system PATH), as the run account."""
    require_root()
    directories, files = _hidden_paths()
    program = Path(argv[0]).resolve()
    assert not any(program.is_relative_to(d) for d in directories), program
    steps = [f"mount -t tmpfs -o size=64k,mode=0755 valis-hidden {shlex.quote(str(d))}"
             for d in directories]
    steps += [f"mount --bind /dev/null {shlex.quote(str(f))}" for f in files]
    run = ["env", "-i", f"PATH={SYSTEM_PATH}", "LC_ALL=C.UTF-8", *argv]
    if as_run_account:
        account = ensure_system_user(RUN_USER)
        run = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
               "--init-groups", "--", *run]
    script = " && ".join([*steps, "exec " + shlex.join(run)])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def run_sandboxed(
    argv: Sequence[str], *, as_run_account: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sandboxed(argv, as_run_account=as_run_account), capture_output=True, text=True,
        timeout=RUN_TIMEOUT, check=False, cwd="/",
    )


def readable_dir(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    return path


def wait_answer(port: int, name: str, deadline: float) -> dns.message.Message:
    query = dns.message.make_query(name, dns.rdatatype.SOA)
    while True:
        try:
            return dns.query.udp(query, "127.0.0.1", port=port, timeout=0.5)
        except (dns.exception.Timeout, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def run_frozen(program: Path, *args: str) -> str:
    done = subprocess.run([str(program), *args], env={"PATH": SYSTEM_PATH},
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the bundle -----------------------------------------------------------------------


def test_the_bundle_holds_both_programs_and_the_metadata_of_every_dependency(
    bundle: Path,
) -> None:
    assert os.access(bundle / "valis", os.X_OK)
    assert os.access(bundle / "fulcrum", os.X_OK)
    frozen = importlib.metadata.distributions(path=[str(bundle / "_internal")])
    names = {str(dist.metadata["Name"]).lower() for dist in frozen}
    for wanted in ("valis", "trio", "dnspython", "psycopg", "psycopg-binary", "cryptography",
                   "pyroute2", "attrs", "cattrs", "packaging"):
        assert wanted in names, names
    assert not names & {"pytest", "hypothesis", "mypy", "pyinstaller", "setuptools", "pip"}


def test_frozen_selftest_answers_with_no_python_on_the_host(bundle: Path) -> None:
    done = run_sandboxed([str(bundle / "valis"), "selftest"])
    assert done.returncode == 0, done.stderr
    assert "serving codec answered" in done.stdout
    # The compiled UDP fast path is in the bundle and answers as the Python path does.
    assert "UDP fast path: compiled" in done.stdout
    # The sandbox is real: the host's own interpreter cannot start in it.
    host_python = Path(sys.base_prefix) / "bin" / "python3"
    refused = run_sandboxed([str(host_python), "-c", "pass"])
    assert refused.returncode != 0
    assert "No module named 'encodings'" in refused.stderr


def test_frozen_valis_serves_a_zone_file_over_udp_and_tcp(
    bundle: Path, build_root: Path
) -> None:
    zones = Path(tempfile.mkdtemp(prefix="zones-", dir=build_root))
    zones.chmod(0o755)
    zone_file = zones / "example.com.zone"
    shutil.copy(REPO / "tests" / "scenario" / "data" / "example.com.zone", zone_file)
    zone_file.chmod(0o644)
    port = free_port()
    argv = [str(bundle / "valis"), "serve", "--zone", str(zone_file),
            "--listen", f"127.0.0.1:{port}"]
    with subprocess.Popen(sandboxed(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          cwd="/") as server:
        try:
            apex = wait_answer(port, "example.com.", time.monotonic() + 30)
            assert apex.rcode() == dns.rcode.NOERROR
            assert apex.flags & dns.flags.AA
            query = dns.message.make_query("www.example.com.", dns.rdatatype.A)
            over_tcp = dns.query.tcp(query, "127.0.0.1", port=port, timeout=5)
            assert over_tcp.flags & dns.flags.AA
            assert over_tcp.answer
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    assert server.returncode == 0, server.stderr.read() if server.stderr else ""


def test_frozen_fulcrum_produces_and_verifies_a_launcher_config(
    bundle: Path, build_root: Path
) -> None:
    config = Path(tempfile.mkdtemp(prefix="fulcrum-", dir=build_root)) / "launcher.toml"
    fulcrum = str(bundle / "fulcrum")
    help_text = run_sandboxed([fulcrum, "--help"], as_run_account=False)
    assert help_text.returncode == 0, help_text.stderr
    assert "usage: fulcrum" in help_text.stdout
    produced = run_sandboxed([
        fulcrum, "config", "produce", "--out", str(config), "--netns-name=valis",
        "--unit-ip=203.0.113.10", "--unit-cidr=25", "--public-interface=ens7",
        "--public-gateway=203.0.113.1", "--mode=dedicated", "--designated-port=53",
        "--catchall-object-path=/opt/valis/lib/sk-lookup-catchall.bpf.o",
        "--valis-command=/opt/valis/current/bin/valis",
    ], as_run_account=False)
    assert produced.returncode == 0, produced.stderr
    verified = run_sandboxed([fulcrum, "config", "verify", str(config)], as_run_account=False)
    assert verified.returncode == 0, verified.stderr
    assert f"{config}: ok" in verified.stdout
    refused = run_sandboxed([fulcrum, "config", "verify", str(config) + ".absent"],
                            as_run_account=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith("fulcrum: ")


def test_frozen_valis_migrates_operator_state_from_its_packaged_schema(
    bundle: Path, pg_cluster: PgCluster
) -> None:
    dsn = pg_cluster.new_database("frozen")
    first = run_sandboxed([str(bundle / "valis"), "db", "migrate", "--dsn", dsn])
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("applied migration(s) 1")
    again = run_sandboxed([str(bundle / "valis"), "db", "migrate", "--dsn", dsn])
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout


def test_a_build_without_the_serving_codec_is_refused_and_its_resident_fails_closed(
    resident_harness: Harness, zone_dsn: str, plain_build: PlainBuild
) -> None:
    plain = plain_build.done
    assert plain.returncode == 1
    assert "failed its self-test, so it must not be staged" in plain.stderr
    assert "valis_core.dns.answer" in plain.stderr
    selftest = subprocess.run([str(plain_build.bundle / "valis"), "selftest"],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert selftest.returncode == 1
    assert selftest.stderr.splitlines()[-1].startswith(
        "valis: serving codec not available: cannot import valis_core.dns.answer"
    ), selftest.stderr
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn),
                                      runtime=str(plain_build.bundle / "valis"))
    assert resident.wait_exit() != 0, resident.stderr()
    assert resident.last_line().startswith("valis: codec: serving codec not available"), (
        resident.stderr()
    )
    assert not resident.notify.seen("READY")
    assert not (resident.state_dir / "owner.key").exists()


# -- modules (contract §5.1) ------------------------------------------------------------


def state_with_module(parent: Path, wheel: tuple[str, bytes], name: str) -> Path:
    """A state directory whose store head pins ``wheel``, installed from a private dist
    into its ``modules`` as the run account (as condense leaves it)."""
    account = ensure_system_user(RUN_USER)
    owner = (account.pw_uid, account.pw_gid)
    state = make_state_dir(parent)
    pin = pin_of(name, "1.0", wheel)
    url = publish(Path(tempfile.mkdtemp(prefix="dist-", dir=parent)), wheel)
    with acting_as(owner):
        head = head_path(state)
        head.parent.mkdir(mode=0o700, parents=True)
        write_atomic(head, dumps(Manifest(generation=0, modules=(pin,))), mode=0o600)
    condense_modules(state, [pin], url, owner=owner)
    return state


def test_the_frozen_resident_loads_an_installed_module_and_the_control_cannot(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str, bundle: Path,
    control_bundle: Path,
) -> None:
    state = state_with_module(resident_harness.workdir, reach_wheel(), REACH)
    resident = resident_harness.start(state, site_facts(zone_dsn),
                                      runtime=str(bundle / "valis"))
    resident.wait_ready()
    report = json.loads((state / "reach.started").read_text())
    assert report["trio"] == importlib.metadata.version("trio")
    assert report["dnspython"] == importlib.metadata.version("dnspython")
    assert {"trio", "dnspython", "psycopg", "valis"} <= set(report["runtime"])
    assert resident.ask("www.example.test.").flags & dns.flags.AA
    resident.proc.send_signal(signal.SIGTERM)
    assert resident.wait_exit() == 0, resident.stderr()
    assert (state / "reach.drained").exists()

    # Another node on a database of its own: on this one the first node holds the fence.
    control_dsn = pg_cluster.new_database("control")
    with pg_cluster.connect(control_dsn) as conn:
        migrate(conn)
    import_zone(pg_cluster, control_dsn, EXAMPLE_ZONE, EXAMPLE_WWW)
    control_state = state_with_module(resident_harness.workdir, reach_wheel(), REACH)
    control = resident_harness.start(control_state, site_facts(control_dsn),
                                     runtime=str(control_bundle / "valis"))
    assert control.wait_exit() != 0, control.stderr()
    last = control.last_line()
    assert last.startswith("valis: modules: module reach"), control.stderr()
    # The first library subsystem the module names that no entry point imports.
    assert "No module named 'cryptography.fernet'" in last
    assert not control.notify.seen("READY")
    assert not (control_state / "reach.started").exists()


def test_module_loading_needs_no_sources_on_the_host_and_the_control_fails_it(
    bundle: Path, control_bundle: Path, build_root: Path
) -> None:
    state = state_with_module(build_root, reach_wheel(), REACH)
    # The resident's own loader, run by the frozen program where no sources exist.
    frozen = run_sandboxed([str(bundle / "valis"), "modules", "check", "--state-dir",
                            str(state)])
    assert frozen.returncode == 0, frozen.stderr
    assert frozen.stdout == "valis: 1 pinned modules load; entry points: reach\n"
    control = run_sandboxed([str(control_bundle / "valis"), "modules", "check",
                             "--state-dir", str(state)])
    assert control.returncode != 0
    refusal = "module reach (valis_reach:make) cannot be loaded: No module named "
    assert refusal + "'cryptography.fernet'" in control.stderr, control.stderr


def test_an_installed_delivery_proves_it_can_take_a_module_and_the_control_cannot(
    delivery: Path, control_bundle: Path, build_root: Path
) -> None:
    """The module-load probe is the operator's command: the delivery installed as apply
    installs it, its own ``valis selftest --modules`` run where no sources exist installs,
    loads, starts and drains a module; the control, frozen without its subsystems, is
    refused with the reason."""
    root = Path(tempfile.mkdtemp(prefix="installed-", dir=build_root))
    root.chmod(0o755)
    stage_delivery(delivery, root)
    switch_current(root, VERSION)
    installed = root / CURRENT_LINK / "bin" / "valis"
    frozen = run_sandboxed([str(installed), "selftest", "--modules"])
    assert frozen.returncode == 0, frozen.stderr
    assert "valis: module-load probe: valis_load_probe-1.0-py3-none-any.whl installed, " \
        "loaded, started and drained; it reached cryptography.fernet" in frozen.stdout
    control = run_sandboxed([str(control_bundle / "valis"), "selftest", "--modules"])
    assert control.returncode == 1, control.stdout + control.stderr
    assert control.stderr.startswith(
        "valis: module-load probe: this binary cannot take a module ("), control.stderr
    assert "rebuild it with make build" in control.stderr


def test_module_requirements_are_met_by_the_frozen_runtime_and_not_by_the_control(
    bundle: Path, control_bundle: Path, build_root: Path
) -> None:
    work = Path(tempfile.mkdtemp(prefix="probe-", dir=build_root))
    work.chmod(0o777)
    url = publish(readable_dir(work, "wheelhouse"), hello_wheel())
    for directory in work.rglob("*"):
        directory.chmod(0o755 if directory.is_dir() else 0o644)
    frozen = run_sandboxed([str(bundle / "valis"), "dist", "probe", url,
                            "--out", str(work / "frozen")])
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    assert "installs 1 together, refuses 0" in frozen.stdout
    control = run_sandboxed([str(control_bundle / "valis"), "dist", "probe", url,
                             "--out", str(work / "control")])
    assert control.returncode == 1, control.stdout + control.stderr
    refusals = (work / "control" / "refusals.txt").read_text()
    assert "valis-hello needs trio>=0.25 (absent)" in refusals


# -- the delivery -----------------------------------------------------------------------


def test_dist_is_a_sound_delivery_of_the_bundle_and_the_unit(
    delivery: Path, bundle: Path, build_root: Path
) -> None:
    manifest = assert_delivery_sound(delivery)
    assert manifest.version == VERSION
    files = {entry.path: entry for entry in manifest.files}
    assert files["bin/valis"].mode == 0o755
    assert files["bin/fulcrum"].mode == 0o755
    # Every unit file the project keeps is delivered as it is, whichever units there are.
    units = {f"lib/systemd/system/{path.name}": path for path in UNITS.iterdir()}
    assert f"lib/systemd/system/{FULCRUM_UNIT.name}" in units
    on_disk = {
        "bin/" + str(path.relative_to(bundle)) for path in bundle.rglob("*")
        if not path.is_dir()
    }
    docs = {f"share/doc/valis/{path.name}" for path in (REPO / "docs").glob("*.md")}
    docs |= {f"share/doc/valis/examples/{name}" for name in (
        "valis-grafana-dashboard.json", "valis-alerts.yml", "valis-alerts.test.yml",
        "valis-alerts-expiry.test.yml")}
    delivered = {*units, "lib/sk-lookup-catchall.bpf.o"}
    assert on_disk | delivered | docs == set(files)
    assert files["lib/sk-lookup-catchall.bpf.o"].mode == 0o644
    with tarfile.open(delivery) as archive:
        assert all(member.isfile() or member.isdir() for member in archive.getmembers())
        for name, source in units.items():
            assert files[name].mode == 0o644
            unit = archive.extractfile(name)
            assert unit is not None
            assert unit.read() == source.read_bytes()
    again = dist(bundle, build_root / "dist" / "again.tar.gz")
    assert again.read_bytes() == delivery.read_bytes()


def test_the_unit_starts_fulcrum_where_apply_puts_the_delivered_one() -> None:
    unit = parse_unit(FULCRUM_UNIT.read_text())
    program = shlex.split(only(unit, "Service", "ExecStart").lstrip("+"))[0]
    assert program == f"{DEFAULT_ROOT}/{CURRENT_LINK}/bin/fulcrum"
    documentation = only(unit, "Unit", "Documentation")
    prefix = f"file://{DEFAULT_ROOT}/{CURRENT_LINK}/share/doc/valis/"
    assert documentation.startswith(prefix)
    assert (REPO / "docs" / documentation.removeprefix(prefix)).is_file()


def test_frozen_apply_stages_the_delivery_whose_fulcrum_launches_a_serving_unit(
    bundle: Path, delivery: Path, build_root: Path, zone_dsn: str, ground: Ground
) -> None:
    """The no-systemd deploy path, all from the delivery: ``valis apply --supervise``
    stages it and starts the staged ``fulcrum launch``, which makes the unit's netns and
    execs the staged ``valis`` as the run account; the zone is asked from the client."""
    root = Path(tempfile.mkdtemp(prefix="opt-valis-", dir=build_root))
    root.chmod(0o755)
    state = make_state_dir(build_root)
    staged = root / CURRENT_LINK / "bin"
    config = build_root / f"launcher-{ground.unit_netns}.toml"
    config.write_text(unit_config_text(ground, [str(staged / "valis")]))
    env = {"PATH": SYSTEM_PATH, "STATE_DIRECTORY": str(state), **site_facts(zone_dsn)}
    unit = shlex.join([str(staged / "fulcrum"), "launch", "--config", str(config)])
    argv = [str(bundle / "valis"), "apply", "--delivery", str(delivery), "--root", str(root),
            "--supervise", unit, "--timeout", "90"]
    stderr_path = build_root / f"apply-{ground.unit_netns}.stderr"
    with stderr_path.open("w") as stderr, subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd="/"
    ) as apply:
        try:
            assert apply.stdout is not None
            line = apply.stdout.readline()
            assert line == f"valis: {VERSION} is serving (previous: none)\n", (
                line + stderr_path.read_text()
            )
            assert os.readlink(root / CURRENT_LINK) == f"versions/{VERSION}"
            for tcp in (False, True):
                soa = dig(ground.client, UNIT_IP, ZONE, "SOA", tcp=tcp)
                assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
            www = dig(ground.client, UNIT_IP, f"www.{ZONE}", "A")
            assert [record.split()[4] for record in www.answer] == ["192.0.2.80"], www.raw
            apply.send_signal(signal.SIGTERM)
            assert apply.wait(60) == 0, stderr_path.read_text()
        finally:
            if apply.poll() is None:
                apply.kill()
                apply.wait()
    log = stderr_path.read_text()
    assert "codec: serving codec answered" in log
    assert f"unit {ground.unit_netns} torn down" in log
    assert ground.unit_netns not in netns_names()
