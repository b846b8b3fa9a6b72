"""``valis stop``'s plan as a value: the socket unit is stopped with the service, in one
systemctl transaction naming the socket first (nothing can activate the service while it
stops), and ``--disable`` disables both; the check after it names a unit still up."""

from __future__ import annotations

import pytest

from valis_cli.commands.stop import DEFAULT_UNIT, StopPlan
from valis_core.ops.provision import CONTROL_SOCKET_UNIT


def test_stop_stops_the_control_socket_with_the_service_socket_first() -> None:
    plan = StopPlan(DEFAULT_UNIT, CONTROL_SOCKET_UNIT)
    assert plan.command == ("systemctl", "stop", "fulcrum-valis-control.socket",
                            "fulcrum-valis.service")
    assert plan.check == ("systemctl", "is-active", "fulcrum-valis-control.socket",
                          "fulcrum-valis.service")
    assert "systemctl start fulcrum-valis.service" in plan.done_text
    assert "enable" not in plan.done_text


def test_disable_disables_both_and_says_to_enable_both_before_starting_again() -> None:
    plan = StopPlan(DEFAULT_UNIT, CONTROL_SOCKET_UNIT, disable=True)
    assert plan.command == ("systemctl", "disable", "--now", "fulcrum-valis-control.socket",
                            "fulcrum-valis.service")
    assert ("systemctl enable fulcrum-valis-control.socket fulcrum-valis.service, then "
            "systemctl start fulcrum-valis.service") in plan.done_text


@pytest.mark.parametrize(("states", "left"), [
    ("inactive\ninactive\n", ()),
    ("inactive\nfailed\n", ()),
    ("active\ninactive\n", ("fulcrum-valis-control.socket",)),
    ("inactive\ndeactivating\n", ("fulcrum-valis.service",)),
    ("active\nactive\n", ("fulcrum-valis-control.socket", "fulcrum-valis.service")),
])
def test_a_unit_still_up_after_the_stop_is_named(states: str, left: tuple[str, ...]) -> None:
    assert StopPlan(DEFAULT_UNIT, CONTROL_SOCKET_UNIT).still_active(states) == left
