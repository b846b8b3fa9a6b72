"""The edge's certificate consumer: the files the ACME side writes, the slot it swaps."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import trio

from tests.scenario.edge_ca import install, make_test_ca
from valis_core.edge.certificate import (
    CertificateSlot,
    EdgeCertificateError,
    load_edge_certificate,
)
from valis_core.edge.certificate_files import follow_certificate_files
from valis_core.state_layout import edge_certificate_path, edge_key_path


def test_no_files_is_no_certificate_yet(tmp_path: Path) -> None:
    assert load_edge_certificate(tmp_path) is None


def test_installed_certificate_loads_with_its_expiry(tmp_path: Path) -> None:
    issued = make_test_ca().issue(("example.test",), days=10)
    install(issued, tmp_path)
    loaded = load_edge_certificate(tmp_path)
    assert loaded == issued
    assert loaded.not_after == issued.not_after


def test_a_key_without_its_chain_is_refused_naming_the_missing_file(tmp_path: Path) -> None:
    install(make_test_ca().issue(("example.test",)), tmp_path)
    edge_certificate_path(tmp_path).unlink()
    with pytest.raises(EdgeCertificateError, match=r"leaf\.crt is missing"):
        load_edge_certificate(tmp_path)


def test_a_key_that_is_not_the_leafs_is_refused(tmp_path: Path) -> None:
    ca = make_test_ca()
    install(ca.issue(("example.test",)), tmp_path)
    edge_key_path(tmp_path).write_bytes(ca.issue(("other.test",)).key_pem)
    with pytest.raises(EdgeCertificateError, match="do not load as a pair"):
        load_edge_certificate(tmp_path)


def test_garbage_chain_is_refused(tmp_path: Path) -> None:
    install(make_test_ca().issue(("example.test",)), tmp_path)
    edge_certificate_path(tmp_path).write_bytes(b"not a certificate")
    with pytest.raises(EdgeCertificateError, match="not a PEM certificate chain"):
        load_edge_certificate(tmp_path)


def test_swap_gives_new_handshakes_a_new_context_and_tells_listeners() -> None:
    ca = make_test_ca()
    first, second = ca.issue(("example.test",)), ca.issue(("example.test",))
    slot = CertificateSlot()
    assert slot.context() is None
    seen: list[object] = []
    slot.on_swap(seen.append)
    slot.swap(first)
    old = slot.context()
    slot.swap(second)
    assert slot.current() == second
    assert slot.context() is not old
    assert seen == [first, second]


def test_a_broken_pair_never_replaces_the_served_one() -> None:
    ca = make_test_ca()
    good = ca.issue(("example.test",))
    slot = CertificateSlot(good)
    broken = ca.issue(("example.test",))
    with pytest.raises(EdgeCertificateError):
        slot.swap(type(good)(broken.chain_pem, good.key_pem, broken.not_after))
    assert slot.current() == good


async def wait_for_swaps(seen: list[object], count: int) -> None:
    with trio.fail_after(10):
        while len(seen) < count:
            await trio.sleep(0.02)


async def test_the_follower_serves_each_new_pair_written_and_never_a_broken_one(
    tmp_path: Path,
) -> None:
    ca = make_test_ca()
    slot = CertificateSlot()
    seen: list[object] = []
    slot.on_swap(seen.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(follow_certificate_files, tmp_path, slot, interval=0.02))
        first = ca.issue(("example.test",))
        install(first, tmp_path)
        await wait_for_swaps(seen, 1)
        assert slot.current() == first
        edge_key_path(tmp_path).write_bytes(ca.issue(("example.test",)).key_pem)
        await trio.sleep(0.2)  # a key that is not the chain's: looked at, never served
        assert slot.current() == first
        second = ca.issue(("example.test",))
        slot.swap(second)  # its writer hands it over itself, then writes the files
        install(second, tmp_path)
        await trio.sleep(0.2)
        assert seen == [first, second]  # the files held what was served: no second swap
        third = ca.issue(("example.test",))
        install(third, tmp_path)
        await wait_for_swaps(seen, 3)
        assert slot.current() == third
        nursery.cancel_scope.cancel()
