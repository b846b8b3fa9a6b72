# The test command is `make test`: it installs what the tests need on a fresh Debian
# machine (Debian packages when missing, a .venv with the package and its test extras),
# then runs ruff, mypy --strict and pytest.
.PHONY: test check lint venv lock bench bench-live bench-handover demo dep-dist build dist

test:
	./scripts/test

# The inner loop (under two minutes, no root): ruff, mypy --strict and the property tier.
# `make test` stays the whole suite, as CI runs it.
check: venv
	.venv/bin/ruff check src tests benchmarks packaging
	.venv/bin/mypy --strict src tests
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} .venv/bin/pytest -q tests/property

venv:
	./scripts/bootstrap

# Pin the build environment (.venv) again: packaging/frozen/requirements.lock, every
# distribution with its hashes, resolved from PyPI to the newest versions pyproject.toml
# allows. Commit the lock; `make venv` then installs it.
lock:
	./scripts/lock

lint: venv
	.venv/bin/ruff check src tests benchmarks packaging
	.venv/bin/mypy --strict src tests

# valis, NSD and Knot side by side (see docs/performance.md); options in BENCH_ARGS, e.g.
# BENCH_ARGS="--plot docs/performance-cpu-per-query.png" or BENCH_ARGS=--quick.
bench: venv
	./benchmarks/dns_qps $(BENCH_ARGS)

# Live changes at any size (docs/performance.md, as root): commit -> new answer on the
# wire by size and layout, 1e4 to 1e6 records, drawn beside the same change on Knot and
# NSD (a quarter of an hour in all), then the normal mix's q/s with and without CHANGES
# single-record changes a second to one zone of a 100-zone node, valis beside Knot. Options in CURVE_ARGS, PEERS_ARGS and RATE_ARGS, e.g.
# CURVE_ARGS="--plot docs/performance-reload-latency.png".
CHANGES ?= 50
bench-live: venv
	./benchmarks/live peers $(PEERS_ARGS)
	./benchmarks/live curve --peers build/bench/reload_latency_peers.json \
		--plot build/bench/reload_latency.png $(CURVE_ARGS)
	./benchmarks/live rate --changes-per-second $(CHANGES) $(RATE_ARGS)

# Queries lost across an upgrade, a reload and a crash (docs/performance.md, as root):
# 10 000 UDP + 200 TCP q/s from a client namespace while `valis apply --delivery`,
# `systemctl reload fulcrum-valis` and a SIGKILL of the resident happen to the shipped
# unit under a real systemd, beside NSD's and Knot's reload, restart and kill -9 under
# their Debian units. Builds the delivery (cached as the scenario tests cache it).
# Options in HANDOVER_ARGS, e.g. HANDOVER_ARGS="--plot docs/performance-handover.png".
bench-handover: venv
	./benchmarks/handover $(HANDOVER_ARGS)

# A whole node on this machine, without root: private PostgreSQL under your cache
# directory, the example zone, a genesis state directory, the resident answering DNS on
# 127.0.0.1:$(PORT) and signed updates on $(PORT)+1. Not 5353: that is multicast DNS.
PORT ?= 5300
demo: venv
	.venv/bin/valis demo --zone docs/examples/example.test.zone --listen 127.0.0.1:$(PORT)

# Ask the private dist at VALIS_DEP_DIST_URL to install its whole catalogue, as a node
# would; the refusal list is written to build/dep-dist/refusals.txt. No default URL: a
# host name in a tracked file becomes somebody else's starting configuration.
dep-dist: venv
	@test -n "$(VALIS_DEP_DIST_URL)" || { echo "set VALIS_DEP_DIST_URL to the dist's simple index" >&2; exit 2; }
	.venv/bin/valis dist probe "$(VALIS_DEP_DIST_URL)" --out build/dep-dist

# The serving binary: this checkout frozen (PyInstaller, onedir) into build/valis/, the
# executables `valis` and `fulcrum` over one bundled interpreter and every dependency,
# and the sk_lookup steer object compiled from packaging/bpf (clang -target bpf).
build: venv
	./scripts/build

# The delivery `valis apply --delivery` takes: build/valis-serving-<version>.tar.gz, the
# bundle under bin/, the steer object under lib/ and the systemd units under
# lib/systemd/system/, with MANIFEST.json.
dist: build
	.venv/bin/python packaging/frozen/dist.py
