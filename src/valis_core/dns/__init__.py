"""The authoritative DNS engine: zone index, answering, serve loops."""
