# make run: set up everything and serve on 127.0.0.1:$(PORT). make test: set up and run the whole suite; make test-fast:
# the quick part of it, for the edit loop.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000

# The first Python >= 3.12 found: pyenv's (via .python-version), then python3.13 / python3.12 / python3.
PYTHON_BOOT := $(shell for c in python3.13 python3.12 python3; do \
	p=$$(command -v $$c 2>/dev/null) || continue; \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: run test test-fast install install-dev setup lint lock clients clean

# Two locks of the whole tree, every package pinned with its hashes: requirements.lock is what the service runs
# (requirements.txt), requirements-dev.lock adds the tests' and lint's tools (requirements-dev.txt). `make run`
# installs the first, `make test` the second; a stamp per lock installs again whenever that lock changes.
RUNTIME_LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
PIP_INSTALL := $(PY) -m pip install -q --disable-pip-version-check --require-hashes

$(PY):
	@if [ -z "$(PYTHON_BOOT)" ]; then \
		echo "reactsite needs Python 3.12 or newer (Django 6.1). Install it (e.g. 'pyenv install 3.12') and retry." >&2; exit 1; fi
	@echo "Creating $(VENV) with $(PYTHON_BOOT)"; $(PYTHON_BOOT) -m venv $(VENV)

$(VENV)/.installed-runtime: $(RUNTIME_LOCK) | $(PY)
	$(PIP_INSTALL) -r $(RUNTIME_LOCK)
	@touch $@

$(VENV)/.installed-dev: $(RUNTIME_LOCK) $(DEV_LOCK) | $(PY)
	$(PIP_INSTALL) -r $(DEV_LOCK)
	@touch $@

install: $(VENV)/.installed-runtime .env
install-dev: $(VENV)/.installed-dev .env

# Writes both locks from requirements.txt and requirements-dev.txt, keeping every version they already pin (after an
# edit of either file; `make lock LOCK_FLAGS=--upgrade` moves everything to the newest releases allowed). uv does the
# resolving; it is installed into the virtualenv for this only, and is in neither lock.
UV_VERSION := 0.13.9
LOCK_FLAGS ?=
UV_COMPILE = $(VENV)/bin/uv pip compile -q --generate-hashes --python-version 3.12 --custom-compile-command 'make lock' $(LOCK_FLAGS)

lock: | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(UV_COMPILE) requirements.txt -o $(RUNTIME_LOCK)
	$(UV_COMPILE) requirements-dev.txt -c $(RUNTIME_LOCK) -o $(DEV_LOCK)

# Development settings, written once and never overwritten (git-ignored): every command of the README reads them,
# so nothing has to be exported by hand. A variable set in the environment still wins over the file.
.env:
	@umask 077; { \
		echo "# Development settings written by 'make' (git-ignored). The environment wins over this file."; \
		echo "DEBUG=1"; \
		echo "SECRET_KEY=dev-$$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"; \
	} > $@
	@echo "Wrote $@ (DEBUG=1 and a generated development SECRET_KEY)"

setup: install
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py collectstatic --noinput -v 0
	$(PY) manage.py ensure_admin

# The background worker lives as long as gunicorn does (Ctrl-C stops both) and, like a process supervisor would,
# is started again if it dies (said in a JSON line, like every other line of the log). One `run_worker` process
# keeps up to 200 background runs in flight.
run: setup
	@trap 'kill $$worker 2>/dev/null' EXIT; \
	( trap 'kill $$child 2>/dev/null; wait $$child; exit 0' TERM; \
	  while true; do $(PY) manage.py run_worker & child=$$!; wait $$child; \
	  printf '{"levelname": "WARNING", "name": "make run", "message": "background worker exited (%s); restarting in 1 s"}\n' \
	    $$? >&2; sleep 1; done ) & worker=$$!; \
	$(VENV)/bin/gunicorn -c gunicorn.conf.py --bind 127.0.0.1:$(PORT) reactsite.wsgi

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The TypeScript client check's tools (tests/clients/ts), pinned by its package-lock.json: installed once with npm ci,
# then offline until the lock file changes. Without npm, tests/clients/test_typescript_types.py is skipped (and says so).
TS_CLIENT := tests/clients/ts
$(TS_CLIENT)/node_modules/.installed: $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(TS_CLIENT) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "npm not found: the TypeScript client check will be skipped" >&2; fi

clients: $(TS_CLIENT)/node_modules/.installed

# The suite across the cores (pytest-xdist): one process a core, each with its own test database (and, with
# REDIS_URL, its own Redis database: tests/conftest.py); a file's tests stay together in one process, so the servers
# a module starts once serve all its tests. TEST_WORKERS=0 runs it in this one process. The schema fuzz is spread
# test by test instead: its operations share one node id, which xdist's by-file scheduling would run only once.
# (Three on PostgreSQL, whose suite waits more than it computes, ran it in 0.57x the time but went past the server's
# 100 connections in one run of three, and timed out twice under the load: two it is.)
TEST_WORKERS ?= auto
SCHEMA_FUZZ := tests/api/test_schema_conformance.py

test: install-dev lint clients
	$(PY) manage.py makemigrations --check --dry-run -v 0
	$(PY) manage.py collectstatic --noinput -v 0
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --ignore=$(SCHEMA_FUZZ)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist load $(SCHEMA_FUZZ)

# The edit loop: the engine, API and unit tests in a few minutes, without what starts servers or other processes
# (integration, browser, CLI and generated-client tests, the PostgreSQL-with-pgvector and bench files, the metrics'
# and tracing's process tests, MCP under gevent) and without the schema fuzz or lint. `make test` runs everything.
FAST_SKIPS := tests/integration tests/browser tests/clients tests/cli $(SCHEMA_FUZZ) \
	tests/memory/test_pgvector.py tests/memory/test_pgvector_server.py tests/evals/test_bench_command.py \
	tests/evals/test_bench_http.py tests/observability/test_metrics.py tests/observability/test_tracing.py \
	tests/tools/test_mcp_green.py

test-fast: install-dev
	$(PY) manage.py collectstatic --noinput -v 0
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile $(addprefix --ignore=,$(FAST_SKIPS))

clean:
	rm -rf $(VENV) db.sqlite3* test_db.sqlite3* $(TS_CLIENT)/node_modules
