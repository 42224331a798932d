# pdserve — local CPU cluster and tests. All targets are idempotent.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= deploy/local.yaml
STAMP := $(VENV)/.pdserve-installed
DEV_STAMP := $(VENV)/.pdserve-dev-installed

.PHONY: install install-dev up down test lint typecheck unit integration clean report-screenshots

install: $(STAMP)

$(STAMP): pyproject.toml constraints/cpu.txt scripts/install.sh
	bash scripts/install.sh $(PYTHON) $(VENV) runtime
	touch $@

install-dev: $(DEV_STAMP)

$(DEV_STAMP): $(STAMP) constraints/dev.txt
	bash scripts/install.sh $(PYTHON) $(VENV) dev
	touch $@

## Start the local disaggregated cluster in the foreground (Ctrl-C stops it).
up: install
	$(VENV)/bin/pdserve up --config $(CONFIG)

down:
	$(VENV)/bin/pdserve down

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install-dev
	bash scripts/typecheck.sh $(VENV)

unit: install-dev
	$(PY) -m pytest tests/unit -q -n auto --maxprocesses=4

integration: install-dev
	$(PY) -m pytest tests/integration -q

## The whole suite: lint, types, the unit, chart and packaging tests (pure: one worker per
## core, at most 4), then the real cluster tests (one at a time: they time real engines).
test: lint typecheck
	$(PY) -m pytest tests/unit tests/chart tests/packaging -q -ra -p no:cacheprovider \
		-n auto --maxprocesses=4 --durations=10
	$(PY) -m pytest tests/integration -q -ra -p no:cacheprovider --durations=15

## Regenerate bench/README.md's report screenshots from real short runs (~8 min, CPU).
report-screenshots: install-dev
	bash scripts/report-screenshots.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .mypy_tree
