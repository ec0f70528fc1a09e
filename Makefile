# netsynth: `make run` sets up .venv, installs and starts the service (API + one worker, SQLite, a filesystem
# broker under ./var) at http://127.0.0.1:8000; `make test` installs, lints and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install frontend frontend-check run test lint typecheck unit pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml requirements/s3-server.txt | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements/s3-server.txt  # the tests' S3 server
	touch $(STAMP)

# the core's oneDNN convolutions (core/onednn.py), compiled against the oneDNN wheels' headers
ONEDNN_LIB := core/native/libonednn_conv.so

$(ONEDNN_LIB): core/native/onednn_conv.cc core/native/build.py $(STAMP)
	$(BIN)/python -m core.native.build --cxx $(CXX)

install: $(STAMP) $(ONEDNN_LIB)

# the dashboard: npm ci from the committed lock file (again only when it changes), then built to static files
# (frontend/dist) that the API serves at /
NODE_STAMP := frontend/node_modules/.installed

$(NODE_STAMP): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

frontend: $(NODE_STAMP)
	cd frontend && npm run build

# the dashboard's own checks: ESLint (type-aware) and Vitest; TypeScript checks it in the build (`tsc -b`)
frontend-check: $(NODE_STAMP)
	cd frontend && npm run lint && npm test

run: install frontend
	$(BIN)/netsynth run

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

unit: install frontend  # the browser tests drive the built dashboard
	$(MAKE) --no-print-directory pytest

pytest:  # two processes (pytest-xdist); any failure fails, "no tests collected" (exit 5) included
	$(BIN)/pytest -q -n 2 $(PYTEST_ARGS)

test: lint typecheck frontend-check unit

bench: install
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/core_throughput.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache frontend/node_modules frontend/dist
