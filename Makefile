# Ballast: every set-up step a fresh machine needs goes through these targets.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8888
POLICY ?= scheduler_config/policy.yaml

.PHONY: run test bench lint venv install install-test clean

# scripts/ensure-venv checks that PYTHON is 3.11+, rebuilds a venv another Python made, and runs the pip
# installs under one lock (so `make run` and `make test` started together do not break each other). Its stamp
# files make re-runs cheap: it reinstalls only when the project or the lock changes. The lock pins the runtime
# dependencies to the versions the image ships (Dockerfile), so tests run against those.
ENSURE = scripts/ensure-venv $(PYTHON) $(VENV)

venv:
	@$(ENSURE)
install:
	@$(ENSURE) . .installed .installed
install-test:
	@$(ENSURE) '.[test]' .installed-test .installed-test .installed

run: install
	$(BIN)/ballast extender --host $(HOST) --port $(PORT) --policy $(POLICY)

test: install-test
	$(BIN)/python -m pytest

bench: install-test
	$(BIN)/python -m bench.extender_bench
	$(BIN)/python -m bench.names_bench
	$(BIN)/python -m bench.annotator_bench
	$(BIN)/python -m bench.rebalancer_bench
	$(BIN)/python -m bench.cpu_assignment_bench
	$(BIN)/python -m bench.reconcile_bench
	$(BIN)/python -m bench.cluster_bench
	$(BIN)/python -m bench.burst_bench

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) $(VENV).lock build *.egg-info .pytest_cache
