# AIGC Hub — the four commands a developer needs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-dev

.PHONY: up test check bench screenshots install dev clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e .
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

dev: $(STAMP)

## Run the hub on embedded defaults (SQLite + embedded log under ./var) until Ctrl-C.
up: $(VENV)/.installed
	$(VENV)/bin/aigc-hub up

## Install with the dev extra and run the whole suite, in PYTEST_WORKERS processes (at most
## 5: each takes its own Redis databases, tests/support/redis_dbs.py).
PYTEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=30 $(PYTEST_ARGS)

## Lint and type-check the package.
check: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples scripts
	$(VENV)/bin/ruff format --check src tests bench examples scripts
	$(VENV)/bin/mypy

## Print the benchmark figures (see docs/benchmarks.md): ours against Huey and Dramatiq in
## alternating rounds (Dramatiq needs Redis on 127.0.0.1:6379), then the generation benches,
## the media toolkit's HLS ladder against bare ffmpeg, and uploads through presigned parts.
bench: $(STAMP)
	$(PIP) install -q -e '.[dev,bench]'
	$(PY) bench/compare.py
	$(PY) bench/submit.py
	$(PY) bench/generation.py
	$(PY) bench/media.py
	$(PY) bench/upload.py
	$(PY) bench/avcc.py

## Regenerate the console screenshots in docs/images/ (system Chromium, a CJK font for Chinese).
screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
