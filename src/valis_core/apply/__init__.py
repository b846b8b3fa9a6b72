"""Delivery staging and unit control."""
