"""Delivery staging and unit control."""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.apply.delivery import (
        DeliveryError,
        DeliveryManifest,
        apply_delivery,
        assert_delivery_sound,
    )

__all__ = [
    "DeliveryError",
    "DeliveryManifest",
    "apply_delivery",
    "assert_delivery_sound",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "DeliveryError": "valis_core.apply.delivery",
        "DeliveryManifest": "valis_core.apply.delivery",
        "apply_delivery": "valis_core.apply.delivery",
        "assert_delivery_sound": "valis_core.apply.delivery",
    },
)
