"""The private dist on a real filesystem and over loopback HTTP: registering it, installing
pinned modules from it into a state directory, the resident loading exactly those, and
measuring a dist's whole catalogue."""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.scenario.edge_ca import make_test_ca
from tests.scenario.module_dist import HELLO, hello_wheel, pin_of, publish, served_over_http
from valis_core.plugin.dist_home import (
    ALLOW_INSECURE,
    DistHomeError,
    Registered,
    read_registration,
    register_dist,
    registration_path,
)
from valis_core.plugin.dist_probe import probe_dist
from valis_core.plugin.install import condense_modules, fetch_modules, fetch_url, resolve_pin
from valis_core.plugin.installed import INSTALLED_RECORD, modules_dir
from valis_core.plugin.modules import ModuleContext, ModuleError, load_modules
from valis_core.plugin.simple_index import DistError
from valis_core.plugin.wheel import WheelError, make_wheel
from valis_core.store.head import head_path
from valis_core.store.manifest import Manifest, ModulePin, dumps

VALIS = str(Path(sys.executable).parent / "valis")


def _listing(root: Path) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = Path(path).read_bytes()
    return found


# -- registration ----------------------------------------------------------------------


def test_registering_any_number_of_times_leaves_exactly_one_registration(
    tmp_path: Path,
) -> None:
    home = tmp_path / "dist-home"
    url = "https://dist.example.test/simple"
    outcomes = [register_dist(home, url) for _ in range(3)]
    assert outcomes == [Registered.CREATED, Registered.UNCHANGED, Registered.UNCHANGED]
    assert os.listdir(home) == ["registration.json"]
    assert read_registration(home) == url + "/"
    assert register_dist(home, "file:///srv/dist/simple/") is Registered.REPLACED
    assert os.listdir(home) == ["registration.json"]
    assert read_registration(home) == "file:///srv/dist/simple/"


@pytest.mark.parametrize(
    "url", ["ftp://dist.example.test/simple/", "https:///simple/", "https://d.test/s/?a=1",
            "file:relative/simple"],
)
def test_an_unusable_index_url_is_refused_and_nothing_recorded(tmp_path: Path, url: str) -> None:
    with pytest.raises(DistHomeError, match="private dist"):
        register_dist(tmp_path, url)
    assert not registration_path(tmp_path).exists()


def test_a_damaged_registration_is_reported_not_guessed(tmp_path: Path) -> None:
    registration_path(tmp_path).write_text('{"index_url": "https://d.test/", "x": 1}')
    with pytest.raises(DistHomeError, match="register the dist again"):
        read_registration(tmp_path)


def test_valis_dist_register_and_show(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    url = "https://dist.example.test/simple/"
    first = subprocess.run([VALIS, "dist", "register", "--dist-home", home, url],
                           capture_output=True, text=True, check=False)
    again = subprocess.run([VALIS, "dist", "register", "--dist-home", home, url],
                           capture_output=True, text=True, check=False)
    shown = subprocess.run([VALIS, "dist", "show", "--dist-home", home],
                           capture_output=True, text=True, check=False)
    assert (first.returncode, again.returncode, shown.returncode) == (0, 0, 0), first.stderr
    assert "created" in first.stdout
    assert "unchanged" in again.stdout
    assert shown.stdout.strip() == url


# -- installing pinned modules -----------------------------------------------------------


@pytest.fixture
def isolated_imports() -> Iterator[None]:
    """Loading a module here (as the resident does) must not leak into later tests."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    (path / "store").mkdir()
    (path / "store" / "head.json").write_text("{}")
    return path


@pytest.mark.usefixtures("isolated_imports")
def test_pinned_modules_install_with_a_record_the_resident_then_loads(
    tmp_path: Path, state_dir: Path
) -> None:
    wheel = hello_wheel()
    url = publish(tmp_path / "wheelhouse", wheel)
    pin = pin_of(HELLO, "1.0", wheel)
    installed = condense_modules(state_dir, [pin], url)
    assert installed == modules_dir(state_dir)
    assert (installed / "valis_hello" / "__init__.py").is_file()
    assert pin.sha256 in (installed / INSTALLED_RECORD).read_text()
    assert sorted(p for p in os.listdir(state_dir) if p.startswith(".")) == []

    context = ModuleContext(state_dir=state_dir, node="node-a", generation=3)
    loaded = load_modules(context, [pin])
    assert [module.name for module in loaded] == ["hello"]

    async def lifecycle() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(loaded[0].lifecycle.run)
            await loaded[0].lifecycle.drain()
            nursery.cancel_scope.cancel()

    trio.run(lifecycle)
    assert (state_dir / "hello.started").read_text() == "node-a 3\n"
    assert (state_dir / "hello.drained").exists()


def test_a_node_without_pins_loads_no_module_even_when_one_is_installed(
    tmp_path: Path, state_dir: Path
) -> None:
    wheel = hello_wheel()
    condense_modules(state_dir, [pin_of(HELLO, "1.0", wheel)], publish(tmp_path / "wh", wheel))
    context = ModuleContext(state_dir=state_dir, node="node-a", generation=0)
    assert load_modules(context, []) == ()


def test_installed_modules_other_than_the_pinned_ones_stop_the_boot(
    tmp_path: Path, state_dir: Path
) -> None:
    old, new = hello_wheel("1.0"), hello_wheel("1.1")
    url = publish(tmp_path / "wh", old, new)
    condense_modules(state_dir, [pin_of(HELLO, "1.0", old)], url)
    context = ModuleContext(state_dir=state_dir, node="node-a", generation=0)
    with pytest.raises(ModuleError, match="not the ones the store head pins"):
        load_modules(context, [pin_of(HELLO, "1.1", new)])


def test_pinned_modules_never_installed_stop_the_boot(state_dir: Path) -> None:
    context = ModuleContext(state_dir=state_dir, node="node-a", generation=0)
    with pytest.raises(ModuleError, match="condense the node again"):
        load_modules(context, [pin_of(HELLO, "1.0", hello_wheel())])


def test_reinstalling_replaces_the_modules_directory_whole(
    tmp_path: Path, state_dir: Path
) -> None:
    old, new = hello_wheel("1.0"), hello_wheel("1.1", greeting=b"# second\n")
    url = publish(tmp_path / "wh", old, new)
    condense_modules(state_dir, [pin_of(HELLO, "1.0", old)], url)
    condense_modules(state_dir, [pin_of(HELLO, "1.1", new)], url)
    names = os.listdir(modules_dir(state_dir))
    assert sorted(names) == sorted([INSTALLED_RECORD, "valis_hello", "valis_hello-1.1.dist-info"])
    assert sorted(os.listdir(state_dir)) == ["modules", "store"]


def test_a_wheel_changed_under_its_pin_is_refused_and_the_state_directory_unchanged(
    tmp_path: Path, state_dir: Path
) -> None:
    pinned = hello_wheel()
    url = publish(tmp_path / "wh", hello_wheel(greeting=b"# not what was pinned\n"))
    before = _listing(state_dir)
    with pytest.raises(DistError, match="changed under the pin"):
        condense_modules(state_dir, [pin_of(HELLO, "1.0", pinned)], url)
    assert _listing(state_dir) == before


def test_a_wheel_whose_page_states_no_hash_is_still_checked_against_the_pin(
    tmp_path: Path, state_dir: Path
) -> None:
    pinned = hello_wheel()
    url = publish(tmp_path / "wh", hello_wheel(greeting=b"# swapped\n"))
    page = tmp_path / "wh" / "simple" / HELLO / "index.html"
    page.write_text(re.sub(r"#sha256=[0-9a-f]+", "", page.read_text()))
    before = _listing(state_dir)
    with pytest.raises(WheelError, match="the manifest pins"):
        condense_modules(state_dir, [pin_of(HELLO, "1.0", pinned)], url)
    assert _listing(state_dir) == before


def test_a_module_needing_what_nothing_supplies_is_refused_naming_it(
    tmp_path: Path, state_dir: Path
) -> None:
    needy = make_wheel("valis-needy", "0.1", [("valis_needy/__init__.py", b"")],
                       requires=["valis-geo>=2"])
    url = publish(tmp_path / "wh", needy)
    with pytest.raises(DistError, match=r"valis-needy needs valis-geo>=2 \(absent\)"):
        condense_modules(state_dir, [pin_of("valis-needy", "0.1", needy)], url)
    assert not modules_dir(state_dir).exists()


def test_a_requirement_met_by_another_pinned_module_installs_both(
    tmp_path: Path, state_dir: Path
) -> None:
    geo = make_wheel("valis-geo", "2.1", [("valis_geo/__init__.py", b"")])
    needy = make_wheel("valis-needy", "0.1", [("valis_needy/__init__.py", b"")],
                       requires=["valis-geo>=2", "nothing-at-all; python_version < '3'"])
    url = publish(tmp_path / "wh", geo, needy)
    pins = [pin_of("valis-geo", "2.1", geo), pin_of("valis-needy", "0.1", needy)]
    installed = condense_modules(state_dir, pins, url)
    assert (installed / "valis_geo").is_dir()
    assert (installed / "valis_needy").is_dir()


def test_resolving_a_genesis_module_pins_the_wheel_the_dist_offers(tmp_path: Path) -> None:
    wheel = hello_wheel()
    url = publish(tmp_path / "wh", wheel, hello_wheel("2.0"))
    pin, contents = resolve_pin(url, "Valis_Hello", "1.0")
    assert pin == ModulePin(name="Valis_Hello", version="1.0", sha256=pin_of(
        HELLO, "1.0", wheel).sha256)
    assert contents.version == "1.0"


# -- over HTTP ---------------------------------------------------------------------------


@pytest.fixture
def http_dist(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The wheelhouse published by a static web server on loopback."""
    wheelhouse = tmp_path / "http-wh"
    with served_over_http(wheelhouse) as url:
        yield url, wheelhouse


def test_modules_install_from_a_dist_served_over_http(
    http_dist: tuple[str, Path], state_dir: Path
) -> None:
    url, wheelhouse = http_dist
    wheel = hello_wheel()
    publish(wheelhouse, wheel)
    installed = condense_modules(state_dir, [pin_of(HELLO, "1.0", wheel)], url)
    assert (installed / "valis_hello" / "__init__.py").is_file()


def test_a_dist_that_does_not_answer_is_named_in_the_refusal(
    http_dist: tuple[str, Path], state_dir: Path
) -> None:
    url, _ = http_dist
    with pytest.raises(DistError, match=r"answered 404 for http://127\.0\.0\.1:\d+/simple/"):
        fetch_url(url + "valis-hello/")


# -- measuring a dist --------------------------------------------------------------------


def test_a_whole_dist_installs_and_the_control_is_refused(tmp_path: Path) -> None:
    geo = make_wheel("valis-geo", "2.1", [("valis_geo/__init__.py", b"")])
    url = publish(tmp_path / "wh", hello_wheel("1.0"), hello_wheel("1.1"), geo)
    report = probe_dist(url, tmp_path / "probe")
    assert report.refusals == ()
    assert report.discriminates
    assert report.offered == ("valis-geo==2.1", "valis-hello==1.0", "valis-hello==1.1")
    assert report.installed == ("valis-geo==2.1", "valis-hello==1.1")


def test_valis_dist_probe_lists_every_refusal_with_its_reason(tmp_path: Path) -> None:
    broken = make_wheel("valis-broken", "1.0", [("valis_broken/__init__.py", b"")])
    needy = make_wheel("valis-needy", "0.1", [("valis_needy/__init__.py", b"")],
                       requires=["valis-geo>=2"])
    url = publish(tmp_path / "wh", hello_wheel(), needy, broken)
    # republish broken bytes under the indexed name: the page's hash no longer holds
    (tmp_path / "wh" / broken[0]).write_bytes(broken[1][:-10])
    out = tmp_path / "measure"
    result = subprocess.run([VALIS, "dist", "probe", url, "--out", str(out)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    refusals = (out / "refusals.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in refusals] == ["valis-broken==1.0", "valis-needy==0.1"]
    assert "but serves bytes with sha256" in refusals[0]
    assert "valis-geo>=2 (absent)" in refusals[1]
    assert "offers 3, installs 1 together, refuses 2" in result.stdout


def test_modules_installing_the_same_file_are_refused_together(
    tmp_path: Path, state_dir: Path
) -> None:
    one = make_wheel("valis-one", "1.0", [("valis_shared/__init__.py", b"A = 1\n")])
    two = make_wheel("valis-two", "1.0", [("valis_shared/__init__.py", b"A = 2\n")])
    url = publish(tmp_path / "wh", one, two)
    pins = [pin_of("valis-one", "1.0", one), pin_of("valis-two", "1.0", two)]
    with pytest.raises(DistError, match=r"both install valis_shared/__init__\.py"):
        condense_modules(state_dir, pins, url)
    assert not modules_dir(state_dir).exists()


def test_a_module_package_the_runtime_would_shadow_is_refused(
    tmp_path: Path, state_dir: Path
) -> None:
    shadowed = make_wheel("valis-dns", "1.0", [("dns/__init__.py", b"")])
    url = publish(tmp_path / "wh", shadowed)
    with pytest.raises(DistError, match="installs 'dns', a name the runtime already imports"):
        condense_modules(state_dir, [pin_of("valis-dns", "1.0", shadowed)], url)


def test_an_interrupted_install_leaves_nothing_behind_the_next_one(
    tmp_path: Path, state_dir: Path
) -> None:
    (state_dir / ".modules-abandoned").mkdir()
    (state_dir / ".modules-abandoned" / "half.py").write_text("")
    wheel = hello_wheel()
    condense_modules(state_dir, [pin_of(HELLO, "1.0", wheel)], publish(tmp_path / "wh", wheel))
    assert sorted(os.listdir(state_dir)) == ["modules", "store"]


@pytest.mark.parametrize(
    ("first", "second", "problem"),
    [
        ("valis_shared", "valis_shared/x.py", "installs valis_shared as a file"),
        ("valis_a.py", "valis-modules.json", "the name of the install record"),
    ],
)
def test_modules_whose_files_cannot_share_one_directory_are_refused(
    tmp_path: Path, state_dir: Path, first: str, second: str, problem: str
) -> None:
    one = make_wheel("valis-one", "1.0", [(first, b"")])
    two = make_wheel("valis-two", "1.0", [(second, b"")])
    url = publish(tmp_path / "wh", one, two)
    pins = [pin_of("valis-one", "1.0", one), pin_of("valis-two", "1.0", two)]
    with pytest.raises(DistError, match=problem):
        condense_modules(state_dir, pins, url)
    assert not modules_dir(state_dir).exists()


def test_valis_modules_check_loads_the_pins_and_names_a_mismatch(
    tmp_path: Path, state_dir: Path
) -> None:
    old, new = hello_wheel("1.0"), hello_wheel("1.1")
    url = publish(tmp_path / "wh", old, new)
    condense_modules(state_dir, [pin_of(HELLO, "1.0", old)], url)
    head = head_path(state_dir)
    head.write_bytes(dumps(Manifest(generation=2, modules=(pin_of(HELLO, "1.0", old),))))
    argv = [VALIS, "modules", "check", "--state-dir", str(state_dir)]
    good = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stderr
    assert good.stdout == "valis: 1 pinned modules load; entry points: hello\n"
    head.write_bytes(dumps(Manifest(generation=2, modules=(pin_of(HELLO, "1.1", new),))))
    bad = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "not the ones the store head pins" in bad.stderr
    assert not (state_dir / "hello.started").exists()


def test_modules_pinned_already_install_from_a_plain_http_dist_without_an_allowance(
    http_dist: tuple[str, Path], state_dir: Path
) -> None:
    """A restore or evacuation installs what the head pins: the sha256 vouches for the
    bytes whatever carried them, so plain http needs no allowance there."""
    url, wheelhouse = http_dist
    wheel = hello_wheel()
    publish(wheelhouse, wheel)
    assert fetch_modules([pin_of(HELLO, "1.0", wheel)], url)[0].version == "1.0"


def test_a_genesis_pin_is_never_taken_over_plain_http_unless_allowed(
    http_dist: tuple[str, Path],
) -> None:
    url, wheelhouse = http_dist
    wheel = hello_wheel()
    publish(wheelhouse, wheel)
    with pytest.raises(DistError, match=rf"pinning valis-hello==1\.0: http://.* {ALLOW_INSECURE}"):
        resolve_pin(url, "valis-hello", "1.0")
    pin, _ = resolve_pin(url, "valis-hello", "1.0", allow_insecure=True)
    assert pin == pin_of(HELLO, "1.0", wheel)


def test_an_https_index_linking_its_wheels_over_plain_http_is_refused_at_genesis(
    tmp_path: Path,
) -> None:
    """The index URL is not the only one fetched: a page on https that sends the wheel
    over plain http would have the pin trust the plain-http bytes."""
    wheel = hello_wheel()
    digest = pin_of(HELLO, "1.0", wheel).sha256
    page = f'<a href="http://wheels.example.test/{wheel[0]}#sha256={digest}">{wheel[0]}</a>'.encode()
    fetched: list[str] = []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        return page if url.endswith("/valis-hello/") else wheel[1]

    with pytest.raises(DistError, match=r"http://wheels\.example\.test/.* is plain http"):
        resolve_pin("https://dist.example.test/simple/", "valis-hello", "1.0", fetch=fetch)
    assert fetched == ["https://dist.example.test/simple/valis-hello/"]


def test_a_plain_http_dist_is_registered_only_when_allowed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = "http://dist.example.test/simple/"
    with pytest.raises(DistHomeError, match=rf"plain http.*{ALLOW_INSECURE}"):
        register_dist(home, url)
    assert not registration_path(home).exists()
    refused = subprocess.run([VALIS, "dist", "register", "--dist-home", str(home), url],
                             capture_output=True, text=True, check=False)
    assert refused.returncode == 1
    assert ALLOW_INSECURE in refused.stderr
    assert not registration_path(home).exists()
    allowed = subprocess.run(
        [VALIS, "dist", "register", "--dist-home", str(home), ALLOW_INSECURE, url],
        capture_output=True, text=True, check=False,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert read_registration(home) == url


class _Redirecting(http.server.BaseHTTPRequestHandler):
    """Over https: every GET sent on to ``target`` (plain http); over http: a page."""

    target = ""

    def do_GET(self) -> None:
        if self.target:
            self.send_response(302)
            self.send_header("Location", self.target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"<html>served over plain http</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@contextlib.contextmanager
def _serving(server: http.server.ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        thread.join(30)
        server.server_close()


def test_a_redirect_from_https_to_plain_http_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An https dist that sends its bytes on over plain http loses what https gave:
    the fetch is refused, naming both URLs."""
    ca = make_test_ca()
    leaf = ca.issue(("localhost",))
    (tmp_path / "root.pem").write_bytes(ca.root_pem)
    (tmp_path / "leaf.pem").write_bytes(leaf.chain_pem + leaf.key_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "root.pem"))
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
    with _serving(plain) as plain_port:
        handler = type("ToPlain", (_Redirecting,), {"target": f"http://127.0.0.1:{plain_port}"})
        secure = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tmp_path / "leaf.pem")
        secure.socket = context.wrap_socket(secure.socket, server_side=True)
        with _serving(secure) as secure_port:
            url = f"https://127.0.0.1:{secure_port}/simple/valis-hello/"
            with pytest.raises(DistError, match=rf"redirected {re.escape(url)} to plain http"):
                fetch_url(url)
            # Only the downgrade is refused here; a plain-http URL asked for as such is
            # held to the allowance where a pin would trust it (resolve_pin).
            assert fetch_url(f"http://127.0.0.1:{plain_port}/simple/").startswith(b"<html>")


def test_provision_refuses_a_plain_http_dist_before_looking_at_the_host() -> None:
    argv = [VALIS, "provision", "--plan", "--node", "n", "--location", "198.51.100.1",
            "--served-zone", "example.test.", "--interface", "lo",
            "--dist", "http://dist.example.test/simple/"]
    refused = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")
    assert refused.returncode == 1
    assert refused.stderr.startswith("valis: private dist 'http://dist.example.test/simple/' "
                                     "is plain http"), refused.stderr
    allowed = subprocess.run([*argv, ALLOW_INSECURE], capture_output=True, text=True,
                             check=False, cwd="/")
    assert "plain http" not in allowed.stderr
