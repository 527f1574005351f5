# NeoCloud: `make demo` runs the embedded default, `make test` runs every check.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test check lint docs-check docs typecheck pytest smoke bench native clean

$(INSTALLED): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "NeoCloud needs Python 3.11 or newer ($(PYTHON) is older)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@touch $@

# The scheduling engine compiled with mypyc (scheduler/engine/native.py). Optional: where it
# cannot be built, the engine runs as plain Python, with the same decisions.
NATIVE := build/native/sources.sha256
ENGINE_SOURCES := $(filter-out %/__init__.py %/native.py,$(wildcard scheduler/engine/*.py))

$(NATIVE): $(INSTALLED) $(ENGINE_SOURCES) scripts/build_engine.py
	@$(PY) scripts/build_engine.py || echo "make: the engine runs as plain Python"

native: $(NATIVE)

# The embedded default: SQLite under var/, Celery tasks in-process, demo data. The demo alone has
# DEBUG, a known SECRET_KEY and admin/admin: loopback only unless DEMO_ALLOW_PUBLIC=1.
demo: $(INSTALLED) $(NATIVE)
	@echo "NeoCloud on http://$(HOST):$(PORT)/  (API /api/v1/, docs /api/docs/, admin /admin/)"
	env -u DATABASE_URL -u REDIS_URL -u SECRET_KEY -u DEBUG -u STRIPE_API_KEY -u STRIPE_API_BASE \
		-u STRIPE_MOCK_URL -u STRIPE_WEBHOOK_SECRET NEOCLOUD_DEMO=1 \
		$(PY) manage.py demo $(HOST):$(PORT)

# Everything CI checks, against real PostgreSQL and Redis (started if none is reachable).
test: $(INSTALLED) $(NATIVE)
	scripts/with-services.sh $(MAKE) --no-print-directory check

check: lint docs-check typecheck pytest smoke

lint:
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The documentation site (mkdocs.yml): --strict fails on a broken link or anchor and on a page
# left out of the navigation (never with --quiet, which hides the warnings --strict counts).
# `make docs` serves it with live reload on http://$(HOST):$(DOCS_PORT)/.
export NO_MKDOCS_2_WARNING := 1
DOCS_PORT ?= 8001

docs-check: $(INSTALLED)
	$(VENV)/bin/mkdocs build --strict

docs: $(INSTALLED)
	$(VENV)/bin/mkdocs serve --strict --dev-addr $(HOST):$(DOCS_PORT)

typecheck:
	$(VENV)/bin/mypy .

# The public traces (../shared/traces beside a checkout) feed a few tests when present.
export NEOCLOUD_TRACES_DIR ?= $(firstword $(wildcard $(CURDIR)/../shared/traces /work/shared/traces))

pytest:
	@test -n "$$DATABASE_URL" || { echo "pytest needs DATABASE_URL (use make test)"; exit 1; }
	$(PY) -m pytest -q

# A few tests again on the embedded default (SQLite, eager tasks), with the engine as plain
# Python (pytest above runs it compiled).
smoke:
	env -u DATABASE_URL -u REDIS_URL NEOCLOUD_ENGINE=python $(PY) -m pytest -q -m smoke

# The suites never charge: a Stripe where nothing answers satisfies the production settings.
bench: $(INSTALLED) $(NATIVE)
	scripts/with-services.sh env STRIPE_API_KEY=sk_test_bench STRIPE_WEBHOOK_SECRET=whsec_bench \
		STRIPE_API_BASE=http://127.0.0.1:9 SECRET_KEY=bench-only-secret-key \
		SECRETS_KEYS=YmVuY2gtb25seS1zZWNyZXRzLWtleS0zMi1ieXRlcyE= \
		$(PY) manage.py bench $(SUITE) --json

clean:
	rm -rf $(VENV) var build .mypy_cache .ruff_cache .pytest_cache .hypothesis .import_linter_cache
