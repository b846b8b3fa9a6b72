"""Delivery staging and unit control."""

from valis_core.apply.delivery import (
    DeliveryError,
    DeliveryManifest,
    apply_delivery,
    assert_delivery_sound,
)

__all__ = ["DeliveryError", "DeliveryManifest", "apply_delivery", "assert_delivery_sound"]
