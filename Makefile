# Ballast: every set-up step a fresh machine needs goes through these targets.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8888
POLICY ?= scheduler_config/policy.yaml

.PHONY: run test bench lint venv install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamp files make re-runs cheap: reinstall only when the project or the lock changes. The lock pins the
# runtime dependencies to the versions the image ships (Dockerfile), so tests run against those.
$(VENV)/.installed: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c requirements.lock -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[test]'
	touch $@ $(VENV)/.installed

venv: $(BIN)/python
install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

run: install
	$(BIN)/ballast extender --host $(HOST) --port $(PORT) --policy $(POLICY)

test: install-test
	$(BIN)/python -m pytest

bench: install-test
	$(BIN)/python -m bench.extender_bench
	$(BIN)/python -m bench.names_bench
	$(BIN)/python -m bench.annotator_bench
	$(BIN)/python -m bench.cpu_assignment_bench
	$(BIN)/python -m bench.reconcile_bench

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
