"""The fuzz tier: the readers of untrusted bytes, driven by a kept corpus and mutations."""
