"""A real systemd as PID 1 of private namespaces: the closest thing here to a fresh host.

``SystemdContainer`` boots the host's own ``/lib/systemd/systemd`` as PID 1 of new pid,
mount, uts, ipc, net and cgroup namespaces over an overlay of the host's ``/`` whose
upper layer is a tmpfs, so nothing written inside reaches the host (the recipe and its
pitfalls: ``notes/systemd-in-namespace.md`` beside the design map). Every name it uses
carries its tag (the cgroup ``<cgroup2 mount>/valis-sd-<tag>``, the work directory
``/run/valis-systemd/<tag>``), so two run side by side.

Use it as a context manager (``with SystemdContainer() as box:``) or through
``systemd_container()``; leaving the block always powers it off and removes what it
made, even when the body failed: power off by SIGRTMIN+4 to its init, a bounded wait,
SIGKILL of the init (which kills the whole PID namespace) as the fallback, then the
cgroup directory and the work directory are removed. ``leftovers()`` says what remains
(it is empty after a clean teardown); ``sweep_stale()`` tears down containers whose
owning process died without doing so.

What the container sees:

- the host's root filesystem as it was at boot (other host mounts are absent, and
  ``/tmp``, ``/run``, ``/dev/shm`` are fresh tmpfs): a host path under ``/tmp`` is
  reachable only through ``binds=`` (bind-mounted at boot, at the same or another path,
  read-only by default) or copied in with ``put``;
- the host's accounts (``/etc/passwd`` is the host's): create the run account on the
  host before boot (``pg.ensure_system_user``);
- none of the host's enabled services: every unit the host enabled under
  ``/etc/systemd/system/*.wants`` (nsd, knot, postgresql, timers, ...) is masked in the
  upper layer, as are the names in ``mask=``; ``unmask`` undoes one, and
  ``start_postgresql`` starts the host's Debian cluster inside (socket
  ``/var/run/postgresql``), for a scenario that provisions a host's own database;
- a network namespace with only ``lo``: ``adopt_link`` moves a host link into it, so a
  proving ground's NIC (``proving_ground.Ground``, whose client namespace stays on the
  host) becomes the container's public interface and the client asks the unit's
  address from outside, as it does on the host.

Commands run inside with ``run`` (``nsenter -t <init> -a``, a system PATH and an empty
environment otherwise), units are read with ``show`` and ``wait_state``, logs with
``journal``. The harness drives ``unshare``, ``nsenter``, ``tar`` and systemd's own
tools only, never the code under test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shlex
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import attrs

from tests.scenario.proving_ground import wait_for

SYSTEMD = "/lib/systemd/systemd"
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
WORK_ROOT = Path("/run/valis-systemd")
CGROUP_PREFIX = "valis-sd-"
COMMAND_TIMEOUT = 60.0
BOOT_TIMEOUT = 60.0
POWEROFF_TIMEOUT = 20.0
KILL_TIMEOUT = 10.0
POLL_INTERVAL = 0.1
STALE_AFTER = 60.0
HOST_WANTS = Path("/etc/systemd/system")

T = TypeVar("T")

# PID 1 of the new namespaces until it execs systemd: build the root and pivot into it.
# $1 the work directory, then bind triples (ro|rw, host path, path inside).
_INNER = r"""
set -eu
D=$1; shift
R=$D/root
mount --make-rprivate /
mount -t tmpfs -o mode=755 valis-sd-upper "$D/ovl"
mkdir "$D/ovl/upper" "$D/ovl/work"
cp -a "$D/seed/." "$D/ovl/upper/"
mount -t overlay valis-sd-root \
  -o "lowerdir=/,upperdir=$D/ovl/upper,workdir=$D/ovl/work" "$R"
mount -t proc proc "$R/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=755,nosuid valis-sd-dev "$R/dev"
cd "$R/dev"
mknod -m 666 null c 1 3; mknod -m 666 zero c 1 5; mknod -m 666 full c 1 7
mknod -m 666 random c 1 8; mknod -m 666 urandom c 1 9; mknod -m 666 tty c 5 0
mkdir pts shm; ln -s pts/ptmx ptmx; ln -s /proc/self/fd fd
ln -s /proc/self/fd/0 stdin; ln -s /proc/self/fd/1 stdout; ln -s /proc/self/fd/2 stderr
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$R/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev valis-sd-shm "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev valis-sd-run "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev valis-sd-tmp "$R/tmp"
while [ $# -ge 3 ]; do
  mkdir -p "$R$3"
  mount --bind "$2" "$R$3"
  if [ "$1" = ro ]; then mount -o remount,bind,ro "$R$3"; fi
  shift 3
done
cd "$R"
mkdir -p .valis-oldroot
pivot_root . .valis-oldroot
umount -l /.valis-oldroot
rmdir /.valis-oldroot
exec env -i container=other PATH=/usr/sbin:/usr/bin:/sbin:/bin /lib/systemd/systemd
"""


class ContainerError(RuntimeError):
    """The container could not be booted, driven or torn down as asked."""


@attrs.frozen
class Bind:
    """A host path bind-mounted into the container at boot (``inside`` defaults to it)."""

    host: Path
    inside: str | None = None
    read_only: bool = True

    @property
    def target(self) -> str:
        return self.inside or str(self.host)


def cgroup2_mount() -> Path:
    """Where the host's cgroup2 hierarchy is mounted (``.../unified`` on a hybrid host)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    raise ContainerError("no cgroup2 hierarchy is mounted on this host; systemd needs one")


def host_enabled_units(wants_root: Path = HOST_WANTS) -> list[str]:
    """The units the host enabled (the links in ``/etc/systemd/system/*.wants``)."""
    names = {
        entry.name
        for wants in wants_root.glob("*.wants")
        for entry in wants.iterdir()
        if entry.is_symlink()
    }
    return sorted(names)


def _ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _command(pid: int) -> str:
    """``pid``'s command line, for a report (its name if the line is gone)."""
    with contextlib.suppress(OSError):
        line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        if line:
            return line.decode(errors="replace")[:200]
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return "gone"


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _started(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None: it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def _ticks_now() -> int:
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _cgroup_of(pid: int) -> str:
    """``pid``'s cgroup (v2) as the host sees it, "" if it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    return ""


def _mountinfo() -> list[str]:
    return Path("/proc/self/mountinfo").read_text().splitlines()


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _remove_cgroup(path: Path, timeout: float) -> None:
    """rmdir the cgroup tree depth-first; a group still emptying is retried, bounded."""
    deadline = time.monotonic() + timeout
    while path.exists():
        for directory in sorted(
            (p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            path.rmdir()
        if not path.exists():
            return
        if time.monotonic() >= deadline:
            raise ContainerError(f"cgroup {path} could not be removed within {timeout:g}s")
        time.sleep(POLL_INTERVAL)


@attrs.define
class SystemdContainer:
    """One booted systemd in private namespaces; ``boot()`` starts it, ``shutdown()``
    (idempotent, safe on a half-booted one) takes it down and removes what it made."""

    tag: str = attrs.field(factory=lambda: secrets.token_hex(3))
    binds: Sequence[Bind] = ()
    mask: Sequence[str] = ()
    boot_timeout: float = BOOT_TIMEOUT
    init_pid: int = 0
    """PID 1 of the container, as the host numbers it (0 until booted)."""
    boot_state: str = ""
    """What ``systemctl is-system-running --wait`` said at boot (``running``)."""
    _launcher: subprocess.Popen[bytes] | None = None
    _namespaces: dict[str, int] = attrs.field(factory=dict)
    # When the shutdown began (clock ticks since boot; 0 while it runs), and the host's
    # mounts then (their ids): see ``_ours`` and ``leftovers``.
    _stopping_at: int = 0
    _mounts_at_stop: frozenset[str] = frozenset()

    # -- names ---------------------------------------------------------------------------

    @property
    def workdir(self) -> Path:
        return WORK_ROOT / self.tag

    @property
    def cgroup(self) -> Path:
        return cgroup2_mount() / f"{CGROUP_PREFIX}{self.tag}"

    @property
    def console_log(self) -> Path:
        """systemd's own console output (the container has no /dev/console)."""
        return self.workdir / "console.log"

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> SystemdContainer:
        return self.boot()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    def boot(self) -> SystemdContainer:
        """Boot it and wait (bounded) until systemd reports the system running."""
        try:
            self._boot()
        except BaseException:
            self.shutdown()
            raise
        return self

    def _boot(self) -> None:
        if self.init_pid:
            raise ContainerError(f"container {self.tag} is already booted")
        if os.geteuid() != 0:
            raise ContainerError("a systemd container needs root")
        started = time.monotonic()
        self._stopping_at = 0
        WORK_ROOT.mkdir(mode=0o700, exist_ok=True)
        self.workdir.mkdir(mode=0o700)
        self._record()
        for name in ("ovl", "root", "seed"):
            (self.workdir / name).mkdir(mode=0o755)
        self._seed_masks()
        (self.workdir / "inner.sh").write_text(_INNER)
        self.cgroup.mkdir()
        bind_args: list[str] = []
        for bind in self.binds:
            if not bind.target.startswith("/"):
                raise ContainerError(f"bind target {bind.target!r} must be absolute")
            bind_args += ["ro" if bind.read_only else "rw", str(bind.host), bind.target]
        launch = (
            'echo $$ > "$1/cgroup.procs" && shift && exec unshare --fork --pid --mount '
            '--uts --ipc --net --cgroup --mount-proc sh "$1/inner.sh" "$@"'
        )
        with open(self.console_log, "wb") as console:
            self._launcher = subprocess.Popen(
                ["sh", "-c", launch, "valis-sd", str(self.cgroup), str(self.workdir),
                 *bind_args],
                stdin=subprocess.DEVNULL, stdout=console, stderr=console,
                env={"PATH": SYSTEM_PATH}, cwd="/",
            )
        launcher = self._launcher

        def init_started() -> int:
            if launcher.poll() is not None:
                raise ContainerError(
                    f"container {self.tag} did not boot (exit {launcher.returncode}): "
                    f"{self.console_log.read_text(errors='replace')[-2000:]}"
                )
            # The launcher shell execs unshare, whose one child is the namespace's init.
            children = _children(launcher.pid)
            return children[0] if children else 0

        self.init_pid = wait_for(init_started, self.boot_timeout, "the container's init")
        self._namespaces = {
            kind: inode for kind in ("pid", "net", "mnt", "cgroup", "ipc", "uts")
            if (inode := _ns_inode(self.init_pid, kind)) is not None
        }
        self._record()

        def bus_up() -> bool:
            if launcher.poll() is not None:
                raise ContainerError(f"container {self.tag} stopped while booting: "
                                     f"{self.console_log.read_text(errors='replace')[-2000:]}")
            done = self.run("test", "-S", "/run/systemd/private", check=False)
            return done.returncode == 0

        wait_for(bus_up, max(1.0, self.boot_timeout - (time.monotonic() - started)),
                 "systemd's private socket")
        left = max(1.0, self.boot_timeout - (time.monotonic() - started))
        done = self.run("timeout", str(int(left) + 1), "systemctl", "is-system-running",
                        "--wait", check=False, timeout=left + 5)
        self.boot_state = done.stdout.strip()
        if self.boot_state not in ("running", "degraded"):
            raise ContainerError(
                f"container {self.tag}: systemd is {self.boot_state or 'not answering'} "
                f"after {left:g}s: {done.stderr.strip()}"
            )

    def _seed_masks(self) -> None:
        """Mask the host's enabled units (and ``mask``) in the upper layer's /etc."""
        units = self.workdir / "seed" / "etc" / "systemd" / "system"
        units.mkdir(parents=True, mode=0o755)
        for name in sorted({*host_enabled_units(), *self.mask}):
            (units / name).symlink_to("/dev/null")

    def _record(self) -> None:
        """Note the owner and the init, so ``sweep_stale`` can clean up after a crash."""
        record = {"owner": os.getpid(), "init": self.init_pid,
                  "pidns": self._namespaces.get("pid", 0)}
        (self.workdir / "owner.json").write_text(json.dumps(record))

    def shutdown(self) -> None:
        """Power off (SIGRTMIN+4), bounded; else SIGKILL the init; remove cgroup and work
        directories. Idempotent; raises only if something could not be removed."""
        init, launcher = self.init_pid, self._launcher
        if not self._stopping_at:
            self._stopping_at = _ticks_now()
            self._mounts_at_stop = frozenset(line.split(" ", 1)[0] for line in _mountinfo())
        if init and _alive(init) and self._namespaces.get("pid") == _ns_inode(init, "pid"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGRTMIN + 4)
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: not _alive(init), POWEROFF_TIMEOUT, "power-off")
            if _alive(init):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init, signal.SIGKILL)
                wait_for(lambda: not _alive(init), KILL_TIMEOUT, "the killed init")
        if launcher is not None:
            try:
                launcher.wait(KILL_TIMEOUT)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait(KILL_TIMEOUT)
        self._launcher = None
        self._reap_stragglers()
        self._remove_dirs()
        self.init_pid = 0

    def _members(self) -> list[int]:
        """Live processes in any of this container's namespaces."""
        return [
            pid for pid in _pids()
            if any(_ns_inode(pid, kind) == inode for kind, inode in self._namespaces.items())
            and _alive(pid) and self._ours(pid)
        ]

    def _ours(self, pid: int) -> bool:
        """Whether ``pid``, in a namespace numbered as one of this container's, is in
        this container's: once the container's namespace is gone the kernel gives its
        number to the next namespace made (another session's container, say), whose
        processes are in another cgroup and started after this shutdown began."""
        if not self._stopping_at:
            return True  # its namespaces are alive: their numbers are theirs alone
        own = f"/{self.cgroup.name}"
        group = _cgroup_of(pid)
        if group == own or group.startswith(own + "/"):
            return True
        started = _started(pid)
        return started is not None and started <= self._stopping_at

    def _reap_stragglers(self) -> None:
        """Wait (bounded) for processes still in the namespaces after the init is gone (a
        process mid-exit, a helper outside the pid namespace), then SIGKILL what stays."""
        if not self._namespaces:
            return
        deadline = time.monotonic() + KILL_TIMEOUT / 2
        while (members := self._members()) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: not self._members(), KILL_TIMEOUT / 2, "the stragglers")

    def _remove_dirs(self) -> None:
        cgroup = self.cgroup
        if cgroup.exists():
            _remove_cgroup(cgroup, KILL_TIMEOUT)
        work = self.workdir
        if not work.exists():
            return
        for name in ("root", "ovl"):
            if os.path.ismount(work / name):
                raise ContainerError(f"{work / name} is still mounted; not removing {work}")
        for path in sorted(work.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        work.rmdir()

    def leftovers(self) -> list[str]:
        """Whatever of this container remains: live processes in its namespaces, a
        namespace of its pinned by a mount (as ``ip netns add`` pins one), its cgroup,
        its work directory. Empty after a clean teardown."""
        found: list[str] = []
        for pid in _pids():
            for kind, inode in self._namespaces.items():
                if _ns_inode(pid, kind) == inode and _alive(pid) and self._ours(pid):
                    found.append(f"process {pid} ({_command(pid)}) in the container's "
                                 f"{kind} namespace")
                    break
        # A pin made after the shutdown began is another namespace's that got the number.
        mounts = [line for line in _mountinfo() if not self._stopping_at
                  or line.split(" ", 1)[0] in self._mounts_at_stop]
        for kind, inode in self._namespaces.items():
            if any(f"{kind}:[{inode}]" in line for line in mounts):
                found.append(f"the container's {kind} namespace, pinned by a mount here")
        if self.cgroup.exists():
            found.append(f"cgroup {self.cgroup}")
        if self.workdir.exists():
            found.append(f"work directory {self.workdir}")
        return found

    # -- driving it ----------------------------------------------------------------------

    def _require_booted(self) -> int:
        if not self.init_pid:
            raise ContainerError(f"container {self.tag} is not booted")
        return self.init_pid

    def run(self, *argv: str, check: bool = True, timeout: float = COMMAND_TIMEOUT,
            input: str | bytes | None = None, env: Mapping[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside (all its namespaces, its root), as root, with a system PATH
        and ``env``; bounded by ``timeout``. With ``check`` a failure raises, with stderr."""
        pid = self._require_booted()
        environment = {"PATH": SYSTEM_PATH, "LC_ALL": "C.UTF-8", **(env or {})}
        data = input.encode() if isinstance(input, str) else input
        done = subprocess.run(
            ["nsenter", "-t", str(pid), "-a", *argv], input=data, capture_output=True,
            timeout=timeout, check=False, env=environment, cwd="/",
        )
        result = subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
        )
        if check and result.returncode != 0:
            raise ContainerError(
                f"in container {self.tag}: {shlex.join(argv)} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result

    def put(self, src: Path | str, dest: str, *, mode: int | None = None,
            owner: str = "root", group: str | None = None) -> None:
        """Copy a host file or directory tree to ``dest`` inside (missing parents are made
        root's, 0755). ``mode`` applies to a file; ``owner``/``group`` to every entry."""
        source = Path(src)
        if not dest.startswith("/"):
            raise ContainerError(f"put: {dest!r} must be an absolute path inside")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:

            def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
                info.uid = info.gid = 0
                info.uname, info.gname = owner, group or owner
                if mode is not None and info.isfile():
                    info.mode = mode
                return info

            archive.add(source, arcname=dest.lstrip("/"), filter=own)
        self.run("tar", "-x", "-C", "/", "--no-overwrite-dir", "--same-owner",
                 "--same-permissions", "-f", "-", input=buffer.getvalue())

    def put_text(self, dest: str, text: str, *, mode: int = 0o644, owner: str = "root",
                 group: str | None = None) -> None:
        """Write ``text`` to the file ``dest`` inside."""
        buffer = io.BytesIO()
        data = text.encode()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(dest.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            info.uname, info.gname = owner, group or owner
            archive.addfile(info, io.BytesIO(data))
        self.run("tar", "-x", "-C", "/", "--no-overwrite-dir", "--same-owner",
                 "--same-permissions", "-f", "-", input=buffer.getvalue())

    def read_text(self, path: str) -> str:
        """A file inside, read from inside."""
        return self.run("cat", "--", path).stdout

    def systemctl(self, *args: str, check: bool = True,
                  timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--no-pager", *args, check=check, timeout=timeout)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """``systemctl show -p PROPS UNIT`` as a mapping (every property when none named)."""
        args = ["show", unit] + ([f"--property={','.join(props)}"] if props else [])
        fields: dict[str, str] = {}
        for line in self.systemctl(*args).stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key] = value
        return fields

    def wait_for(self, predicate: Callable[[], T | None], timeout: float, what: str) -> T:
        """Poll ``predicate`` (bounded): its first truthy value."""
        return wait_for(predicate, timeout, what)

    def wait_state(self, unit: str, states: str | Sequence[str] = "active", *,
                   timeout: float = COMMAND_TIMEOUT, prop: str = "ActiveState",
                   also: Sequence[str] = ()) -> dict[str, str]:
        """Wait (bounded) until ``prop`` of ``unit`` is one of ``states``; the unit's
        ``prop`` and ``also`` properties as they were then."""
        wanted = {states} if isinstance(states, str) else set(states)

        def reached() -> dict[str, str] | None:
            fields = self.show(unit, prop, *also)
            return fields if fields.get(prop) in wanted else None

        try:
            return wait_for(reached, timeout, f"{unit} {prop} in {sorted(wanted)}")
        except TimeoutError as exc:
            now = self.show(unit, "ActiveState", "SubState", "Result", "NRestarts")
            raise TimeoutError(f"{exc}; it is {now}; its journal:\n{self.journal(unit)}") from None

    def journal(self, unit: str, *, output: str = "cat", priority: str | None = None) -> str:
        """What the unit logged, as journald keeps it (``journalctl -u UNIT -o OUTPUT``;
        with ``priority``, only lines at it or more urgent: ``-p PRIORITY``)."""
        self.run("journalctl", "--sync", check=False)
        chosen = ("-p", priority) if priority is not None else ()
        return self.run("journalctl", "--no-pager", "-u", unit, "-o", output, *chosen,
                        check=False).stdout

    def unmask(self, *units: str) -> None:
        self.systemctl("unmask", *units)

    def start_postgresql(self, timeout: float = COMMAND_TIMEOUT) -> Path:
        """Start the host's Debian PostgreSQL inside (its data a copy-on-write of the
        host's); the socket directory."""
        self.unmask("postgresql.service")
        self.systemctl("start", "postgresql.service", timeout=timeout)
        socket_dir = Path("/var/run/postgresql")
        self.wait_for(
            lambda: self.run("sh", "-c", f"ls {socket_dir}/.s.PGSQL.*", check=False
                             ).returncode == 0,
            timeout, "PostgreSQL's socket",
        )
        return socket_dir

    def adopt_link(self, name: str) -> None:
        """Move the host's link ``name`` into the container's network namespace."""
        pid = self._require_booted()
        done = subprocess.run(["ip", "link", "set", "dev", name, "netns", str(pid)],
                              capture_output=True, text=True, check=False,
                              timeout=COMMAND_TIMEOUT)
        if done.returncode != 0:
            raise ContainerError(f"cannot move link {name} into container {self.tag}: "
                                 f"{done.stderr.strip()}")

    def pids_of(self, unit: str) -> list[int]:
        """The unit's processes, as the container numbers them (its cgroup's members)."""
        control = self.show(unit, "ControlGroup").get("ControlGroup", "")
        if not control:
            return []
        listed = self.run("cat", f"/sys/fs/cgroup{control}/cgroup.procs", check=False)
        return [int(pid) for pid in listed.stdout.split()]


@contextlib.contextmanager
def systemd_container(tag: str | None = None, *, binds: Sequence[Bind] = (),
                      mask: Sequence[str] = ()) -> Iterator[SystemdContainer]:
    """A booted container for the block; torn down afterwards whatever happened."""
    container = SystemdContainer(binds=binds, mask=mask) if tag is None else (
        SystemdContainer(tag, binds=binds, mask=mask))
    with container:
        yield container


def sweep_stale() -> list[str]:
    """Tear down containers whose owning process is gone; their tags."""
    swept: list[str] = []
    if not WORK_ROOT.is_dir():
        return swept
    for entry in WORK_ROOT.iterdir():
        try:
            record = json.loads((entry / "owner.json").read_text())
            owner, init, pidns = int(record["owner"]), int(record["init"]), int(record["pidns"])
        except (OSError, ValueError, KeyError, TypeError):
            owner, init, pidns = 0, 0, 0
            with contextlib.suppress(OSError):
                if time.time() - entry.stat().st_mtime < STALE_AFTER:
                    continue  # being made this moment; its owner is about to say so
        if owner and _alive(owner):
            continue
        stale = SystemdContainer(entry.name, init_pid=init)
        # Its owner is gone and its namespaces' numbers may be another's by now: only its
        # cgroup says which processes are its (``_ours``).
        stale._stopping_at = 1
        if pidns:
            stale._namespaces["pid"] = pidns
        stale.shutdown()
        swept.append(entry.name)
    return swept
