# The README's commands. `make demo` runs the app on the embedded default; `make test` runs the suite.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= $(shell scripts/find-python)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
export PORT

.PHONY: help demo test lint format bench clean

help:
	@echo "make demo   set up and run Guardian on http://127.0.0.1:$(PORT) (web + worker + beat)"
	@echo "make test   install the dev tools and run lint and the whole test suite"
	@echo "make lint   ruff check, format check and the engine's import contract"
	@echo "make format reformat in place;  make bench  time the engine's per-turn work"

# A stamp per install flavour, redone whenever pyproject.toml changes.
$(BIN)/python:
	@test -n "$(PYTHON)" || exit 1
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	@touch $@ $(VENV)/.installed-base

demo: $(VENV)/.installed-base
	$(BIN)/python manage.py preflight
	$(BIN)/python manage.py migrate --no-input
	$(BIN)/python manage.py demo_setup
	@echo "Guardian is starting on http://127.0.0.1:$(PORT)  (Ctrl-C stops the web server, worker and beat)"
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/honcho --procfile Procfile.demo start --port $(PORT)

test: $(VENV)/.installed-dev lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench.engine
	$(BIN)/python -m bench.task_roundtrip

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var
