# netsynth: `make run` sets up .venv, installs and starts the service (API + one worker, SQLite, a filesystem
# broker under ./var) at http://127.0.0.1:8000; `make test` installs, lints and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install frontend run test lint typecheck unit bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# the dashboard, when frontend/ has one: built to static files the API serves
frontend:
	@if [ -f frontend/package.json ]; then cd frontend && npm ci --no-audit --no-fund && npm run build; fi

run: install frontend
	$(BIN)/netsynth run

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -q -n 2 || [ $$? -eq 5 ]  # two processes (pytest-xdist); exit 5 = no tests collected

test: lint typecheck unit

bench: install
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/core_throughput.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
