# The README's commands. `make demo` runs the app on the embedded default; `make test` runs the suite.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= $(shell scripts/find-python)
VENV := .venv
BIN := $(VENV)/bin
# The demo's web port: from the command line (make demo PORT=8001) or the environment, else a
# PORT=… line of .env (the settings read the rest of .env themselves), else 8000.
dotenv_number = $(shell sed -n -E "s/^[[:space:]]*(export[[:space:]]+)?$(1)[[:space:]]*=[[:space:]]*[\"']?([0-9.]+)[\"']?[[:space:]]*(\#.*)?\$$/\2/p" .env 2>/dev/null | tail -n 1)
PORT ?= $(or $(call dotenv_number,PORT),8000)
export PORT
# The demo starts a demo traffic run every minute (runs/demo_traffic.py) unless the
# environment or .env says otherwise (0: none).
DEMO_TRAFFIC_SECONDS := $(or $(GUARDIAN_DEMO_TRAFFIC_SECONDS),$(call dotenv_number,GUARDIAN_DEMO_TRAFFIC_SECONDS),60)

.PHONY: help demo test messages lint format bench clean guardian-model guardian-report example-langgraph example-agents soak load

help:
	@echo "make demo   set up and run Guardian on http://127.0.0.1:$(PORT) (web + worker + beat)"
	@echo "make test   install the dev tools and run lint and the whole test suite"
	@echo "make lint   ruff check, format check and the engine's import contract"
	@echo "make format reformat in place"
	@echo "make messages  update locale/*/django.po and djangojs.po after marking words for translation"
	@echo "make guardian-model  refit the local guardian on training/ and rewrite its artefact"
	@echo "make guardian-report the local guardian measured leave-one-source-out on real material"
	@echo "make bench  medians and ratios: engine, durable turn vs LangGraph, workers, local guardian, external steps, MCP gateway"
	@echo "make soak   the whole stack under load with workers, Redis and PostgreSQL failing, then its checks"
	@echo "make load   N outside loops stepping against gunicorn, workers, PostgreSQL, Redis (LOAD_LOOPS=200 LOAD_SECONDS=60)"
	@echo "make example-langgraph / make example-agents   an agent loop guarded from outside, against make demo"

# A stamp per install flavour, redone whenever pyproject.toml changes.
$(BIN)/python:
	@test -n "$(PYTHON)" || exit 1
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e .
	@touch $@

# The tests drive the Python client and its LangGraph and Agents SDK adapters (clients/python)
# against a live server, so the dev install includes them.
$(VENV)/.installed-dev: pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]' \
	  -e './clients/python[langgraph,agents]'
	@touch $@ $(VENV)/.installed-base

# The bench extra (LangGraph) is optional: without it the bench skips that section and says so.
# The external step section drives the Python client (clients/python), installed with it.
$(VENV)/.installed-bench: pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[bench]' -e ./clients/python \
	  || { echo "the bench extra did not install: the LangGraph section will be skipped"; \
	       $(BIN)/uv pip install --quiet --python $(BIN)/python -e . -e ./clients/python; }
	@touch $@ $(VENV)/.installed-base

# Ctrl-C is how the demo stops: honcho then stops web, worker and beat and answers 130, which
# the recipe takes as a clean stop (any other failure stays one). Each process runs in a session
# of honcho's own and gets its SIGTERM; the worker's pool is threads (Procfile.demo), so no pool
# child is killed under it, and scripts/demo-honcho gives its warm shutdown 30 s, not 5, before
# a SIGKILL.
# The port is checked before anything changes: migrate and demo_setup (which resets the demo
# passwords) run only once the web server is sure to start. Honcho reads no .env of its own
# (--env /dev/null): the settings read it, and there the environment wins over the file.
demo: $(VENV)/.installed-base
	$(BIN)/python manage.py preflight --port $(PORT)
	$(BIN)/python manage.py compilemessages --verbosity 0
	$(BIN)/python manage.py migrate --no-input
	$(BIN)/python manage.py demo_setup
	@echo "Guardian is starting on http://127.0.0.1:$(PORT)  (Ctrl-C stops the web server, worker and beat)"
	PATH="$(CURDIR)/$(BIN):$$PATH" GUARDIAN_DEMO_TRAFFIC_SECONDS=$(DEMO_TRAFFIC_SECONDS) $(BIN)/python scripts/demo-honcho --env /dev/null --procfile Procfile.demo start --port $(PORT) \
	  || { status=$$?; [ $$status -eq 130 ] && echo "Guardian stopped (Ctrl-C): web server, worker and beat are down." || exit $$status; }

# The suite compiles the translations itself (tests/conftest.py), so a bare pytest has them too.
test: $(VENV)/.installed-dev lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# After marking new words for translation: brings locale/*/django.po in line with the sources;
# then translate what it added (the translation test names what is missing).
messages: $(VENV)/.installed-base
	$(BIN)/python manage.py makemessages --all
	$(BIN)/python manage.py makemessages --all -d djangojs

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The local guardian's fitted model (guardian_core/adapters/local_model/): rebuilt from the
# corpus in training/ after the corpus or the training code changes; a test checks the
# committed artefact is what this writes.
guardian-model: $(VENV)/.installed-base
	$(BIN)/python -m training.build_local_model

# Every figure out-of-source: trained without a public source, measured on it, in turn
# (training/report.py); about half an hour on two cores, most of it integrity's.
guardian-report: $(VENV)/.installed-base
	$(BIN)/python -m training.report --json var/guardian-report.json

# On the embedded default unless DATABASE_URL / CELERY_BROKER_URL are set; BENCH_JSON=path
# writes the figures as JSON too. The knobs are in bench/__main__.py.
bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var

# The Python client's examples (clients/python/examples) against a running `make demo`, in
# another terminal, with the GUARDIAN_URL and GUARDIAN_TOKEN that demo_setup prints; the client
# and both frameworks are installed first; the local guardian judges each step. ARGS is passed on
# (e.g. ARGS='--wait 60').
$(VENV)/.installed-examples: clients/python/pyproject.toml | $(VENV)/.installed-base
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e './clients/python[langgraph,agents]'
	@touch $@

example-langgraph: $(VENV)/.installed-examples
	$(BIN)/python clients/python/examples/langgraph_refund.py $(ARGS)

example-agents: $(VENV)/.installed-examples
	$(BIN)/python clients/python/examples/agents_sdk_refund.py $(ARGS)

# The soak with faults (issue 26): its own throwaway PostgreSQL and Redis (ports 54400 and
# 63800), gunicorn, two workers and beat; SOAK_ARGS is passed on (e.g. SOAK_ARGS=--ci for CI's
# size, '--runs 600 --seconds 600' for a longer one). The knobs are in soak/__main__.py.
soak: $(VENV)/.installed-bench
	$(BIN)/python -m soak $(SOAK_ARGS)

# The load test (issue 29): LOAD_LOOPS outside loops (asyncio clients, a token each) stepping
# external runs for LOAD_SECONDS against the soak's stack (its own PostgreSQL and Redis on ports
# 54410 and 63810, gunicorn, two workers, beat), LOAD_HELD of the steps held for the scripted
# reviewer; per call p50/p99, steps/s, CPU per step, the queue page's p95; exits 1 on any error.
# The defaults are CI's size; the issue's is `make load LOAD_LOOPS=200 LOAD_SECONDS=60`.
# LOAD_ARGS is passed on (e.g. '--guardian scripted --web-threads 16'; python -m load --help).
LOAD_LOOPS ?= 20
LOAD_SECONDS ?= 20
LOAD_HELD ?= 0.1
load: $(VENV)/.installed-bench
	$(BIN)/python -m load --loops $(LOAD_LOOPS) --seconds $(LOAD_SECONDS) --held $(LOAD_HELD) $(LOAD_ARGS)
