# The test command is `make test`: it installs what the tests need on a fresh Debian
# machine (Debian packages when missing, a .venv with the package and its test extras),
# then runs ruff, mypy --strict and pytest.
.PHONY: test lint venv bench demo

test:
	./scripts/test

venv:
	./scripts/bootstrap

lint: venv
	.venv/bin/ruff check src tests benchmarks
	.venv/bin/mypy --strict src

bench: venv
	./benchmarks/dns_qps

# A whole node on this machine, without root: private PostgreSQL under your cache
# directory, the example zone, a genesis state directory, the resident on 127.0.0.1:5353.
demo: venv
	.venv/bin/valis demo --zone docs/examples/example.test.zone
