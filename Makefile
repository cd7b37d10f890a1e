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

# The numeric kernel sets the notebook check is run under by `make test-kernels` (and by CI):
# PyTorch's plain kernels and its AVX2 ones. `make test` runs the machine's own choice.
# (ATEN_CPU_CAPABILITY=default/avx2/avx512 picks them; an empty value is not the same as unset.)
KERNELS ?= default avx2
NBVAL := $(PY) -m pytest --nbval --nbval-current-env --nbval-sanitize-with $(NB_SANITIZE)

# Two at a time (JOBS=1: one at a time, in order). The unit tests run JOBS at a time with
# pytest-xdist (`--dist loadfile`: one test file on one worker). The chapters run in two rounds:
#   1. the chapters that compute on one thread (book.setup(threads=1)), JOBS at a time, also with
#      `--dist loadfile`: a notebook, all its cells in order, stays on one worker. A chapter that
#      times something (a claim on a speed ratio) thus shares the two cores with at most one
#      other single-threaded chapter;
#   2. one at a time, alone: NB_BOTH_CORES, the chapters that use both cores (chapter 11's live
#      run trains on two threads, chapter 17 starts two processes; beside another chapter they
#      would slow it and be slowed far more: two threads on a shared core wait on each other), and
#      NB_CLOSE_TIMES, chapters with a speed claim too close to its bound to be measured beside
#      another chapter (chapter 13: the fused kernel against a Python loop under the plain kernels,
#      1.35-1.73 times faster in the claims sweep, claimed at least 1.1, measured 1.09 once beside
#      another chapter).
# tests/lint/test_repo_config.py finds the chapters that use both cores in the code and checks the list.
JOBS ?= 2
NB_BOTH_CORES := chapters/11_training.ipynb chapters/17_parallel.ipynb
NB_CLOSE_TIMES := chapters/13_attention_cost.ipynb
# NB's words as paths like chapters/NN_name.ipynb (a folder: its notebooks), so the list above matches.
NB_FILES = $(patsubst ./%,%,$(subst //,/,$(foreach f,$(or $(NB),chapters),\
	$(or $(sort $(wildcard $(f:/=)/*.ipynb)),$(f)))))
NB_ROUND1 = $(filter-out $(NB_BOTH_CORES) $(NB_CLOSE_TIMES),$(NB_FILES))
NB_ROUND2 = $(filter $(NB_BOTH_CORES) $(NB_CLOSE_TIMES),$(NB_FILES))
XDIST = $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist loadfile)
# $(call nbval_rounds,OPTIONS): both rounds run even if the first fails; non-zero if either did.
nbval_rounds = rc=0; \
	$(if $(NB_ROUND1),$(NBVAL) $(1) $(if $(word 2,$(NB_ROUND1)),$(XDIST)) $(NB_ROUND1) || rc=1;) \
	$(if $(NB_ROUND2),$(NBVAL) $(1) $(NB_ROUND2) || rc=1;) \
	exit $$rc

.PHONY: help env lock book vendor test lint test-unit test-notebooks test-kernels test-notebooks-gpu test-torch-versions notebooks serve lab browser-test bench clean

help:
	@echo "make book          build the website into _build/html (warnings are errors)"
	@echo "make test          lint, unit tests, then every chapter re-run and compared with its outputs"
	@echo "make lint          ruff on the package, tests and scripts; the repository's configuration (tests/lint)"
	@echo "make test-unit     the unit tests of transformer_lib alone (no lint, no notebooks)"
	@echo "make test-notebooks  every chapter re-run and compared (NB=... for some)"
	@echo "make test-kernels  the notebook check under each of PyTorch's kernel sets: $(KERNELS)"
	@echo "make test-notebooks-gpu  the notebook check with TL_DEVICE=$(GPU) (needs that device; NB=... for some)"
	@echo "make test-torch-versions  the unit tests under each locked torch (locks/unit-torch-*.txt)"
	@echo "make lock          rewrite requirements.lock and the other locks from the top-level pins"
	@echo "make notebooks     re-execute chapters in place (NB=\"chapters/04_*.ipynb\" for some)"
	@echo "make serve         serve _build/html on http://127.0.0.1:$(PORT)"
	@echo "make lab           open the chapters in JupyterLab"
	@echo "make browser-test  load every built page in headless Chromium (after make book)"
	@echo "make bench         the performance report: chapters, make test, a training step, attention, site (BENCH=... for some)"

# PyTorch's wheel. On PyPI, torch==2.13.0 for Linux x86_64 is the CUDA build (several GB with
# its NVIDIA libraries; it runs on the CPU too). `make test TORCH=cpu` (or `make book TORCH=cpu`)
# adds PyTorch's own CPU package index, whose torch==2.13.0 is the CPU build (a few hundred MB).
# Opt-in: by default nothing but the package index is contacted. macOS and Windows wheels on
# PyPI are CPU builds already.
TORCH ?=
PIP_TORCH := $(if $(filter cpu,$(TORCH)),--extra-index-url https://download.pytorch.org/whl/cpu)

# The environment, exactly as locked (scripts/lock.py says how the locks are made):
#   1. requirements.lock: every package but torch, pinned with hashes (pip checks them);
#   2. anything installed earlier that the lock no longer lists is removed;
#   3. torch, at requirements.txt's pin (see TORCH above for which build);
#   4. transformer_lib itself, editable; then `pip check`.
# tests/lint/test_lock.py checks that what is installed is the lock.
# pip byte-compiles what it installs one file at a time; here it installs without (--no-compile)
# and the environment's modules are then compiled on every core at once (compileall -j 0), as pip
# would have compiled them. They must be compiled at install: where PYTHONDONTWRITEBYTECODE is set
# (as on the machine this book's .ci/run runs on) Python never writes a compiled module itself, and
# every process would compile torch again as it imports it. compileall's listing is discarded and
# its exit status ignored: a module that does not compile for this Python (a test file written for
# a newer one) is left as pip leaves it; a missing site-packages folder stops the recipe. The
# folder is purelib (in a venv on Linux lib64 links to lib, so platlib is the same folder, and on
# macOS and Windows they are one). On this book's 2-core machine:
# 118 s with pip's own compiling, 62 s + 29 s this way (the lock and torch from local wheels,
# measured once by hand); the performance report's `make test` section times `make env`.
TORCH_VERSION := $(shell sed -n 's/^torch==\([0-9][0-9.]*\).*/\1/p' requirements.txt)
PIP := $(PY) -m pip --disable-pip-version-check
PIP_INSTALL := $(PIP) install --no-compile
env: $(ENV_STAMP)
$(ENV_STAMP): requirements.lock requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --quiet --require-hashes --no-deps -r requirements.lock
	@extra="$$($(PY) scripts/lock.py extras)"; \
	if [ -n "$$extra" ]; then echo "removing packages the lock does not list:" $$extra; \
		$(PIP) uninstall --quiet --yes $$extra; fi
	$(PIP_INSTALL) --quiet $(PIP_TORCH) "torch==$(TORCH_VERSION)"
	$(PIP_INSTALL) --quiet --no-deps -e .
	site="$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" && test -d "$$site" \
		&& { $(PY) -W ignore -m compileall -q -j 0 "$$site" > /dev/null || true; }
	$(PIP) check
	@touch $@

# Rewrite every lock from the top-level pins (requirements.txt, binder/requirements.in, the
# torch floor in pyproject.toml) with uv, which requirements.txt pins; then `make env`.
# The newest torch on the package index is looked up now, and its unit-test lock written.
lock: $(ENV_STAMP)
	$(PY) scripts/lock.py

# The site's own copy of MathJax, require.js and the widgets' HTML manager (no CDN).
vendor: $(VENDOR_STAMP)
$(VENDOR_STAMP): $(SITE_JS)/package-lock.json $(SITE_JS)/widgets-config.js scripts/vendor_js.py $(ENV_STAMP)
	npm ci --prefix $(SITE_JS) --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PY) scripts/vendor_js.py
	@touch $@

# --all: rebuild every page, so that a warning in an unchanged page still fails the build and
# a changed static file is copied (Sphinx skips both when no page is out of date).
book: $(ENV_STAMP) $(VENDOR_STAMP)
	@# The models the attention explorer runs in the browser: re-exported if a checkpoint changed.
	$(PY) scripts/export_onnx.py --if-stale
	$(VENV)/bin/jupyter-book build --all --warningiserror --nitpick --keep-going .
	@# Every script and stylesheet must come from the site itself.
	@if grep -rlE '<(script|link)[^>]+(src|href)="(https?:)?//' --include='*.html' _build/html; then \
		echo "error: the pages above load a script or stylesheet from another host" >&2; exit 1; fi
	@echo "Built _build/html/index.html"

test: lint test-unit test-notebooks

# ruff on the package, its tests and scripts (pyproject.toml's [tool.ruff]: pyflakes, pycodestyle's
# errors, lines of at most 120 characters), then the checks of the repository rather than of the
# package: exact version pins, the chapters' setup cell and code width, README and CI wording
# (tests/lint/).
lint: $(ENV_STAMP)
	$(PY) -m ruff check transformer_lib tests scripts
	$(PY) -m pytest tests/lint

test-unit: $(ENV_STAMP)
	$(PY) -m pytest tests --ignore=tests/lint $(XDIST)

# Every chapter re-run in a fresh kernel and compared output by output with what is committed
# (facts strictly; figures and tagged measurement cells as CONTRIBUTING.md describes).
test-notebooks: $(ENV_STAMP)
	@$(call nbval_rounds,)

# The same check as another machine would run it: once per kernel set in KERNELS. Every set
# is run; the target fails at the end if any of them failed.
test-kernels: $(ENV_STAMP)
	@failed=""; for cap in $(KERNELS); do \
		echo "=== notebooks with ATEN_CPU_CAPABILITY=$$cap ==="; \
		( export ATEN_CPU_CAPABILITY=$$cap; $(call nbval_rounds,-q) ) || failed="$$failed $$cap"; \
	done; \
	if [ -n "$$failed" ]; then echo "notebook check failed under:$$failed" >&2; exit 1; fi

# The notebook check with every chapter computing on a GPU (TL_DEVICE makes book.setup choose it;
# `make test-notebooks-gpu GPU=mps` on Apple silicon). The committed outputs were made on the
# CPU: facts (shapes, tokens, equalities) must still match, measurement cells assert their
# claims on the GPU too, and a rounded number that a GPU kernel rounds the other way is reported
# as a difference to look at (book/how_to_run.md, "On a GPU"). It checks first that the device
# is there, so that a machine without one fails at once with a clear message.
GPU ?= cuda
test-notebooks-gpu: $(ENV_STAMP)
	TL_DEVICE=$(GPU) $(PY) -c "import transformer_lib as tl; print('device:', tl.runtime.resolve_device())"
	TL_DEVICE=$(GPU) $(NBVAL) $(or $(NB),chapters)

# The unit tests (not the notebooks) under other PyTorch releases than the pin, each in its own
# locked environment (locks/unit-torch-X.txt, written by `make lock`): the oldest release that
# pyproject.toml allows (chapters 1-16), the oldest for chapter 17's parallel code
# (transformer_lib.parallel, 2.10.0) and the newest release when the locks were last made.
# Below 2.10 the parallel tests (tests/test_parallel.py) are left out: that code needs 2.10.
# Each environment is the lock (with hashes) plus that torch, with transformer_lib from this
# checkout (PYTHONPATH); it is kept under TORCH_ENVS between runs, rebuilt when its lock
# changes, and removed after 30 days unused. PyPI's Linux torch is the CUDA build, and `import
# torch` needs its NVIDIA libraries even on the CPU: about 6-7 GB and several minutes to
# download per new environment, nothing on a reused one.
# `PIP_CONSTRAINT=/dev/null` lifts a machine-wide cap on torch (see /etc/xdg/pip) for these
# installs (an empty PIP_CONSTRAINT does not: pip ignores an empty variable).
# Every version runs; the target fails at the end if any failed.
# `make test-torch-versions TORCH_VERSIONS="2.10.0"` runs some (each must have a lock).
TORCH_ENVS ?= $(HOME)/.cache/transformer-book/torch-envs
TORCH_PARALLEL := 2.10.0
TORCH_VERSIONS ?= $(patsubst locks/unit-torch-%.txt,%,$(wildcard locks/unit-torch-*.txt))

test-torch-versions:
	@mkdir -p "$(TORCH_ENVS)"
	@find "$(TORCH_ENVS)" -mindepth 1 -maxdepth 1 -name 'torch-*' -mtime +30 -exec rm -rf {} +
	@failed=""; \
	for v in $(TORCH_VERSIONS); do \
		lockfile="locks/unit-torch-$$v.txt"; \
		if [ ! -f "$$lockfile" ]; then echo "error: no $$lockfile (make lock writes the locks)" >&2; \
			failed="$$failed $$v"; continue; fi; \
		env="$(TORCH_ENVS)/torch-$$v"; \
		lock_hash="$$(sha256sum "$$lockfile" | cut -c1-16)"; \
		echo "=== unit tests with torch $$v, environment $$env ==="; \
		if [ "$$(cat "$$env/.ready" 2> /dev/null)" != "$$v $$lock_hash" ]; then \
			start=$$(date +%s); \
			rm -rf "$$env" && $(PYTHON) -m venv "$$env" \
			&& "$$env/bin/pip" install --disable-pip-version-check --no-cache-dir --quiet \
				--require-hashes --no-deps -r "$$lockfile" \
			&& PIP_CONSTRAINT=/dev/null "$$env/bin/pip" install --disable-pip-version-check \
				--no-cache-dir --quiet "torch==$$v" \
			&& "$$env/bin/pip" check --disable-pip-version-check \
			|| { echo "error: could not make the environment for torch $$v" >&2; failed="$$failed $$v"; continue; }; \
			echo "$$v $$lock_hash" > "$$env/.ready"; \
			echo "environment ready in $$(( $$(date +%s) - start )) s, $$(du -sh "$$env" | cut -f1)"; \
		fi; \
		touch "$$env/.ready" "$$env"; \
		got="$$("$$env/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"; \
		if [ "$$got" != "$$v" ]; then echo "error: $$env holds torch $$got, not $$v" >&2; \
			failed="$$failed $$v"; continue; fi; \
		skip=""; if [ "$$(printf '%s\n' "$$v" "$(TORCH_PARALLEL)" | sort -V | head -1)" != "$(TORCH_PARALLEL)" ]; then \
			skip="--ignore=tests/test_parallel.py --ignore=tests/test_parallel_pipeline.py"; echo "(torch $$v < $(TORCH_PARALLEL): chapter 17's parallel tests left out)"; fi; \
		PYTHONPATH="$(CURDIR)" "$$env/bin/python" -m pytest tests --ignore=tests/lint -q $(XDIST) $$skip \
			|| failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "unit tests failed under torch:$$failed" >&2; exit 1; fi

notebooks: $(ENV_STAMP)
	$(PY) scripts/execute_notebooks.py $(NB)

serve:
	@test -f _build/html/index.html || { echo "no site yet: run make book" >&2; exit 1; }
	$(PYTHON) -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

lab: $(ENV_STAMP)
	$(VENV)/bin/jupyter lab

browser-test: $(ENV_STAMP)
	$(PY) -m pytest tests/browser

# The performance report (not a test; about 45 minutes on 2 cores for every part). Run it on a
# quiet machine: it waits up to 15 minutes for the load average to fall below 1.5 and records
# it. Each part replaces only its own section of benchmarks/RESULTS.md and its JSON file;
# `make bench BENCH="chapters make-test"` runs some parts (chapters make-test step attention site).
BENCH ?=
bench: $(ENV_STAMP) $(VENDOR_STAMP)
	$(PY) benchmarks/run.py --wait-for-load 900 $(foreach part,$(BENCH),--only $(part))

clean:
	rm -rf _build book/_vendor artifacts
