"""Reading the private dist's PEP 503 pages and choosing the pinned wheel from them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.tags import Tag

from tests.hypothesis_profiles import scaled
from valis_core.plugin.simple_index import (
    DistError,
    DistFile,
    choose_wheels,
    parse_project_page,
    parse_root_page,
    project_url,
    render_project_page,
    render_root_page,
)

INDEX = "https://dist.example.test/simple/"
PURE = [Tag("py3", "none", "any")]
A = "a" * 64
B = "b" * 64

_names = st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,12}[A-Za-z0-9]", fullmatch=True)
_versions = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True)
_digests = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


def _wheel(name: str, version: str, digest: str | None, tag: str = "py3-none-any") -> DistFile:
    filename = f"{name.replace('-', '_')}-{version}-{tag}.whl"
    return DistFile(filename=filename, url=INDEX + "files/" + filename, sha256=digest)


@settings(max_examples=scaled(0.6), deadline=None)
@given(
    files=st.lists(
        st.tuples(_names, _versions, _digests), max_size=6, unique_by=lambda f: f[:2]
    )
)
def test_a_rendered_project_page_reads_back_as_its_files(
    files: list[tuple[str, str, str]],
) -> None:
    named = [(f"{name}-{version}-py3-none-any.whl", digest) for name, version, digest in files]
    page_url = INDEX + "valis-hello/"
    page = render_project_page(named, prefix="../../")
    parsed = parse_project_page(page, page_url)
    assert sorted((file.filename, file.sha256) for file in parsed) == sorted(named)
    assert all(file.url == INDEX.removesuffix("simple/") + file.filename for file in parsed)


@settings(max_examples=scaled(0.6), deadline=None)
@given(names=st.lists(_names, max_size=8))
def test_a_rendered_root_page_lists_each_normalised_project_once(names: list[str]) -> None:
    listed = parse_root_page(render_root_page(names))
    assert len(listed) == len(set(listed))
    assert set(listed) == {project_url("", name).strip("/") for name in names}


def test_project_urls_are_normalised_with_one_trailing_slash() -> None:
    assert project_url("https://dist.example.test/simple", "Valis_Hello.Geo") == (
        "https://dist.example.test/simple/valis-hello-geo/"
    )


def test_a_stated_hash_that_is_not_sha256_is_not_trusted() -> None:
    page = '<a href="x-1.0-py3-none-any.whl#md5=abc">x-1.0-py3-none-any.whl</a>'
    assert parse_project_page(page, INDEX + "x/")[0].sha256 is None


def test_the_exact_version_is_chosen_never_a_newer_one() -> None:
    files = [_wheel("valis-hello", "1.0", A), _wheel("valis-hello", "1.1", B)]
    chosen = choose_wheels(files, "valis-hello", "1.0", PURE, index_url=INDEX, sha256=A)
    assert [file.filename for file in chosen] == ["valis_hello-1.0-py3-none-any.whl"]


def test_equal_versions_in_other_spellings_are_the_same_version() -> None:
    files = [_wheel("Valis.Hello", "1.0.0", A)]
    assert choose_wheels(files, "valis-hello", "1.0", PURE, index_url=INDEX, sha256=A)


def test_a_version_the_dist_lacks_is_refused_naming_what_it_offers() -> None:
    files = [_wheel("valis-hello", "1.1", A), _wheel("valis-hello", "2.0", B)]
    with pytest.raises(DistError, match=r"offers valis-hello at 1\.1, 2\.0, not 1\.0"):
        choose_wheels(files, "valis-hello", "1.0", PURE, index_url=INDEX)


def test_a_project_the_dist_lacks_is_refused() -> None:
    with pytest.raises(DistError, match="offers no wheel of valis-hello"):
        choose_wheels([_wheel("valis-other", "1.0", A)], "valis-hello", "1.0", PURE,
                      index_url=INDEX)


def test_wheels_for_another_interpreter_are_refused() -> None:
    files = [_wheel("valis-hello", "1.0", A, tag="cp27-cp27mu-manylinux1_x86_64")]
    with pytest.raises(DistError, match="none installable by this interpreter"):
        choose_wheels(files, "valis-hello", "1.0", PURE, index_url=INDEX)


def test_a_dist_whose_wheel_changed_under_the_pin_is_refused() -> None:
    with pytest.raises(DistError, match="changed under the pin"):
        choose_wheels([_wheel("valis-hello", "1.0", B)], "valis-hello", "1.0", PURE,
                      index_url=INDEX, sha256=A)


def test_a_file_stating_the_pinned_hash_comes_first_and_unstated_ones_stay() -> None:
    files = [
        _wheel("valis-hello", "1.0", None, tag="py3-none-any"),
        _wheel("valis-hello", "1.0", A, tag="py311-none-any"),
    ]
    tags = [*PURE, Tag("py311", "none", "any")]
    chosen = choose_wheels(files, "valis-hello", "1.0", tags, index_url=INDEX, sha256=A)
    assert [file.sha256 for file in chosen] == [A, None]
