"""A module wheel is installed only when it is exactly the pinned one, checked whole."""

from __future__ import annotations

import io
import stat
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.plugin.wheel import WheelError, make_wheel, read_wheel, sha256_hex
from valis_core.store.manifest import ModulePin

ENTRY = "[valis.modules]\nhello = valis_hello:make\n"

_segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
_paths = st.lists(_segment, min_size=1, max_size=3).map(lambda parts: "pkg/" + "/".join(parts))
_files = st.dictionaries(_paths, st.binary(max_size=64), min_size=1, max_size=6).filter(
    # a path that is also another's directory cannot exist in one tree
    lambda files: not any(other.startswith(path + "/") for path in files for other in files)
)


def _pin(data: bytes, name: str = "valis-hello", version: str = "1.0") -> ModulePin:
    return ModulePin(name=name, version=version, sha256=sha256_hex(data))


def _rezip(data: bytes, change: dict[str, bytes | None], add: dict[str, bytes] | None = None,
           *, link: str | None = None) -> bytes:
    """The wheel's members with some replaced (None removes one), some added."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            body = change.get(info.filename, source.read(info))
            if body is not None:
                target.writestr(info, body)
        for name, body in (add or {}).items():
            info = zipfile.ZipInfo(name)
            if name == link:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            target.writestr(info, body)
    return out.getvalue()


@settings(max_examples=scaled(0.4), deadline=None)
@given(files=_files)
def test_a_made_wheel_reads_back_as_exactly_its_files(files: dict[str, bytes]) -> None:
    _, data = make_wheel("valis-hello", "1.0", sorted(files.items()), entry_points=ENTRY)
    contents = read_wheel(data, _pin(data))
    installed = dict(contents.files)
    assert {path: installed[path] for path in files} == files
    extra = set(installed) - set(files)
    assert {path.split("/")[0] for path in extra} == {"valis_hello-1.0.dist-info"}


@settings(max_examples=scaled(0.4), deadline=None)
@given(files=_files, data=st.data())
def test_any_member_changed_after_recording_is_refused(
    files: dict[str, bytes], data: st.DataObject
) -> None:
    _, wheel = make_wheel("valis-hello", "1.0", sorted(files.items()))
    victim = data.draw(st.sampled_from(sorted(files)))
    tampered = _rezip(wheel, {victim: files[victim] + b"#"})
    with pytest.raises(WheelError, match="does not match its RECORD"):
        read_wheel(tampered, _pin(tampered))


def test_equal_arguments_make_equal_wheels() -> None:
    args = ("valis-hello", "1.0", [("valis_hello/__init__.py", b"X = 1\n")])
    assert make_wheel(*args) == make_wheel(*args)


def test_bytes_other_than_the_pinned_wheel_are_refused() -> None:
    _, data = make_wheel("valis-hello", "1.0", [("valis_hello/__init__.py", b"")])
    _, other = make_wheel("valis-hello", "1.0", [("valis_hello/__init__.py", b"X = 2\n")])
    with pytest.raises(WheelError, match="the manifest pins"):
        read_wheel(other, _pin(data))


@pytest.mark.parametrize(
    ("name", "version", "problem"),
    [("valis-other", "1.0", "names another project"), ("valis-hello", "1.1", "another project")],
)
def test_a_wheel_of_another_project_or_version_is_refused(
    name: str, version: str, problem: str
) -> None:
    _, data = make_wheel(name, version, [("valis_hello/__init__.py", b"")])
    with pytest.raises(WheelError, match=problem):
        read_wheel(data, _pin(data))


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        ("/etc/cron.d/valis", "absolute path"),
        ("valis_hello/../../outside.py", r"'\.\.' component"),
    ],
)
def test_members_escaping_the_module_directory_are_refused(member: str, problem: str) -> None:
    _, data = make_wheel("valis-hello", "1.0", [("valis_hello/__init__.py", b"")])
    bad = _rezip(data, {}, {member: b"x"})
    with pytest.raises(WheelError, match=problem):
        read_wheel(bad, _pin(bad))


def test_a_link_member_is_refused() -> None:
    _, data = make_wheel("valis-hello", "1.0", [("valis_hello/__init__.py", b"")])
    bad = _rezip(data, {}, {"valis_hello/key": b"/etc/shadow"}, link="valis_hello/key")
    with pytest.raises(WheelError, match="not a regular file"):
        read_wheel(bad, _pin(bad))


def test_a_member_missing_from_record_is_refused() -> None:
    _, data = make_wheel("valis-hello", "1.0", [("valis_hello/__init__.py", b"")])
    bad = _rezip(data, {}, {"valis_hello/extra.py": b"print('hi')\n"})
    with pytest.raises(WheelError, match="is not in its RECORD"):
        read_wheel(bad, _pin(bad))


def test_a_record_entry_the_wheel_lacks_is_refused() -> None:
    _, data = make_wheel("valis-hello", "1.0", [("valis_hello/__init__.py", b"")])
    bad = _rezip(data, {"valis_hello/__init__.py": None})
    with pytest.raises(WheelError, match="which the wheel does not hold"):
        read_wheel(bad, _pin(bad))


def test_scripts_outside_the_module_directory_are_refused() -> None:
    files = [("valis_hello-1.0.data/scripts/hello", b"#!/bin/sh\n")]
    _, data = make_wheel("valis-hello", "1.0", files)
    with pytest.raises(WheelError, match="'scripts' scheme"):
        read_wheel(data, _pin(data))


def test_purelib_data_is_installed_at_the_root() -> None:
    files = [("valis_hello-1.0.data/purelib/valis_hello/__init__.py", b"X = 1\n")]
    _, data = make_wheel("valis-hello", "1.0", files)
    assert dict(read_wheel(data, _pin(data)).files)["valis_hello/__init__.py"] == b"X = 1\n"


def test_declared_requirements_are_read() -> None:
    _, data = make_wheel("valis-hello", "1.0", [], requires=["attrs>=23", "trio; extra == 'x'"])
    requires = read_wheel(data, _pin(data)).requires
    assert [str(requirement) for requirement in requires] == ["attrs>=23", 'trio; extra == "x"']


def test_a_truncated_wheel_is_refused() -> None:
    _, data = make_wheel("valis-hello", "1.0", [("valis_hello/__init__.py", b"")])
    cut = data[: len(data) // 2]
    with pytest.raises(WheelError, match="not a zip archive"):
        read_wheel(cut, _pin(cut))


def test_a_path_installed_both_as_a_file_and_as_a_directory_is_refused() -> None:
    files = [("valis_hello", b"x"), ("valis_hello/__init__.py", b"")]
    _, data = make_wheel("valis-hello", "1.0", files)
    with pytest.raises(WheelError, match="both as a file and as a directory"):
        read_wheel(data, _pin(data))
