"""The systemd container harness boots a real systemd and always leaves the host as found."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.proving_ground import wait_for
from tests.scenario.systemd_container import (
    Bind,
    SystemdContainer,
    host_enabled_units,
    sweep_stale,
)

REPO = Path(__file__).resolve().parents[2]


class _Planned(Exception):
    """The failure a test body raises on purpose."""


def test_two_containers_run_side_by_side_and_leave_nothing_behind() -> None:
    require_root()
    sweep_stale()
    first, second = SystemdContainer(), SystemdContainer()
    with first, second:
        assert (first.boot_state, second.boot_state) == ("running", "running")
        assert first.cgroup != second.cgroup
        assert first.workdir != second.workdir
        for box in (first, second):
            assert box.run("cat", "/proc/1/comm").stdout.strip() == "systemd"
            assert box.show("multi-user.target", "ActiveState") == {"ActiveState": "active"}
        # What one writes stays in its own upper layer, and out of the host's root.
        first.put_text("/etc/valis-container-probe", "first\n")
        assert first.read_text("/etc/valis-container-probe") == "first\n"
        assert second.run("test", "-e", "/etc/valis-container-probe", check=False).returncode
        assert not Path("/etc/valis-container-probe").exists()
    assert first.leftovers() == []
    assert second.leftovers() == []


def test_a_failing_body_still_powers_the_container_off_with_its_services() -> None:
    require_root()
    box = SystemdContainer()

    def fail_with_a_service_running() -> None:
        with box:
            box.run("systemd-run", "--unit=valis-probe-sleeper", "sleep", "600")
            box.wait_state("valis-probe-sleeper.service", "active")
            assert box.leftovers(), "a booted container is visible to leftovers()"
            raise _Planned

    with pytest.raises(_Planned):
        fail_with_a_service_running()
    assert box.leftovers() == []


def test_what_the_container_left_is_told_and_nothing_of_what_came_after_it() -> None:
    """A namespace of the container pinned on the host is a leftover; a namespace made
    after its shutdown, which the kernel may give a number of the container's, is not."""
    require_root()
    box = SystemdContainer()
    with tempfile.TemporaryDirectory(prefix="valis-pin-", dir="/tmp") as scratch:
        pin = Path(scratch) / "net"
        pin.touch()
        with box:
            subprocess.run(["mount", "--bind", f"/proc/{box.init_pid}/ns/net", str(pin)],
                           check=True, timeout=30)
        try:
            assert "the container's net namespace, pinned by a mount here" in box.leftovers()
        finally:
            subprocess.run(["umount", str(pin)], check=True, timeout=30)
    assert box.leftovers() == []
    # A namespace made now takes a freed number first (its mount namespace, the lowest,
    # the container's): its process is not the container's.
    sleeper = subprocess.Popen(["unshare", "--mount", "--net", "--ipc", "--uts", "sleep", "30"])
    try:
        home = os.stat("/proc/self/ns/mnt").st_ino
        wait_for(lambda: os.stat(f"/proc/{sleeper.pid}/ns/mnt").st_ino != home, 10,
                 "the sleeper's own namespaces")
        assert box.leftovers() == []
    finally:
        sleeper.kill()
        sleeper.wait(timeout=30)


def test_the_hosts_enabled_services_are_masked_and_its_tmp_is_only_bound_in() -> None:
    require_root()
    enabled = host_enabled_units()
    with tempfile.TemporaryDirectory(prefix="valis-bind-", dir="/tmp") as shared:
        (Path(shared) / "marker").write_text("from the host\n")
        with SystemdContainer(binds=[Bind(Path(shared), "/srv/shared")]) as box:
            for unit in enabled:
                fields = box.show(unit, "LoadState", "ActiveState")
                assert fields == {"LoadState": "masked", "ActiveState": "inactive"}, unit
            assert box.read_text("/srv/shared/marker") == "from the host\n"
            hidden = box.run("test", "-e", f"{shared}/marker", check=False)
            assert hidden.returncode != 0, "the host's /tmp is not the container's"
            written = box.run("sh", "-c", "echo x > /srv/shared/marker", check=False)
            assert written.returncode != 0, "a bind is read-only unless asked otherwise"
        assert box.leftovers() == []


def test_a_container_whose_owner_died_is_swept_with_everything_in_it() -> None:
    require_root()
    tag = secrets.token_hex(3)
    boot = (
        "import sys, time\n"
        "from tests.scenario.systemd_container import SystemdContainer\n"
        f"box = SystemdContainer({tag!r}).boot()\n"
        "print(box.init_pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", boot], stdout=subprocess.PIPE, text=True,
                             cwd=REPO)
    try:
        assert owner.stdout is not None
        init = int(owner.stdout.readline())  # bounded by the container's boot timeout
    finally:
        owner.kill()
        owner.wait(30)
        if owner.stdout is not None:
            owner.stdout.close()
    orphan = SystemdContainer(tag)
    assert orphan.workdir.exists()
    assert Path(f"/proc/{init}").exists(), "killing its owner does not stop the container"
    assert tag in sweep_stale()
    assert not Path(f"/proc/{init}").exists()
    assert orphan.leftovers() == []
