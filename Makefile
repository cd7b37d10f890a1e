# The book's commands. `make book` and `make test` work on a fresh clone: they create the
# virtual environment .venv/ first if it is missing (once; a stamp file remembers it).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ENV_STAMP := $(VENV)/.book-env-installed
SITE_JS := scripts/site_js
VENDOR_STAMP := book/_vendor/.vendored
NB_SANITIZE := tests/nbval_sanitize.cfg
PORT ?= 8000
# `make notebooks NB="chapters/04_qkv_attention.ipynb"` re-executes just those.
NB ?=

.PHONY: help env book vendor test notebooks serve lab browser-test bench clean

help:
	@echo "make book          build the website into _build/html (warnings are errors)"
	@echo "make test          unit tests, then every chapter re-run and compared with its outputs"
	@echo "make notebooks     re-execute chapters in place (NB=\"chapters/04_*.ipynb\" for some)"
	@echo "make serve         serve _build/html on http://127.0.0.1:$(PORT)"
	@echo "make lab           open the chapters in JupyterLab"
	@echo "make browser-test  load every built page in headless Chromium (after make book)"
	@echo "make bench         measure chapters, attention and site; writes benchmarks/RESULTS.md"

# The environment: pinned requirements plus transformer_lib itself, editable.
env: $(ENV_STAMP)
$(ENV_STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check --quiet -r requirements.txt -e .
	@touch $@

# The site's own copy of MathJax, require.js and the widgets' HTML manager (no CDN).
vendor: $(VENDOR_STAMP)
$(VENDOR_STAMP): $(SITE_JS)/package-lock.json $(SITE_JS)/widgets-config.js scripts/vendor_js.py $(ENV_STAMP)
	npm ci --prefix $(SITE_JS) --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PY) scripts/vendor_js.py
	@touch $@

# --all: rebuild every page, so that a warning in an unchanged page still fails the build and
# a changed static file is copied (Sphinx skips both when no page is out of date).
book: $(ENV_STAMP) $(VENDOR_STAMP)
	$(VENV)/bin/jupyter-book build --all --warningiserror --nitpick --keep-going .
	@# Every script and stylesheet must come from the site itself.
	@if grep -rlE '<(script|link)[^>]+(src|href)="(https?:)?//' --include='*.html' _build/html; then \
		echo "error: the pages above load a script or stylesheet from another host" >&2; exit 1; fi
	@echo "Built _build/html/index.html"

test: $(ENV_STAMP)
	$(PY) -m pytest tests
	@if compgen -G "chapters/*.ipynb" > /dev/null; then \
		$(PY) -m pytest --nbval --nbval-current-env --nbval-sanitize-with $(NB_SANITIZE) chapters; \
	else echo "no chapter notebooks yet: nothing to compare"; fi

notebooks: $(ENV_STAMP)
	$(PY) scripts/execute_notebooks.py $(NB)

serve:
	@test -f _build/html/index.html || { echo "no site yet: run make book" >&2; exit 1; }
	$(PYTHON) -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

lab: $(ENV_STAMP)
	$(VENV)/bin/jupyter lab

browser-test: $(ENV_STAMP)
	$(PY) -m pytest tests/browser

# The performance report (not a test; about 25 minutes on 2 cores). Run it on a quiet machine:
# it waits up to 15 minutes for the load average to fall below 1.5 and records it.
bench: $(ENV_STAMP) $(VENDOR_STAMP)
	$(PY) benchmarks/run.py --wait-for-load 900

clean:
	rm -rf _build book/_vendor artifacts
