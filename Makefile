# The two commands a newcomer needs: `make demo` and `make test`. Each sets up what it
# needs on a fresh machine: a virtual environment, pip packages and, when run as root,
# Debian's lavapipe (mesa-vulkan-drivers) and chromium.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ember-installed
export XDG_RUNTIME_DIR ?= /tmp/ember-xdg-$(shell id -u)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test acceptance lint setup system-deps web-deps models web bench peers wheel clean

demo: setup models
	$(PY) -m ember.cli demo

test: lint web-deps
	@mkdir -p $(XDG_RUNTIME_DIR) && chmod 700 $(XDG_RUNTIME_DIR)
	$(PY) -m pytest -q -m "not acceptance"

# The real-model page runs too long for every commit (Whisper tiny.en's 30 s encoder window
# takes 5-16 minutes on SwiftShader here), and a family's second real model (Whisper base)
# adds minutes to what its first already checks: run before a release and on a change there.
acceptance: lint web-deps
	@mkdir -p $(XDG_RUNTIME_DIR) && chmod 700 $(XDG_RUNTIME_DIR)
	$(PY) -m pytest -q -m acceptance

# Lint everything, check the formatting of all but tests (their diff stays moves and
# additions), type-check the base layers and the backend contract, check the import layers.
# The configuration of each is in pyproject.toml.
FORMATTED := core web build_scripts benchmarks
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check $(FORMATTED)
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

setup: system-deps $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,lint]'
	touch $(STAMP)

# Root on a Debian machine without lavapipe or chromium: install them. Elsewhere, say
# what is missing and go on (tests then skip those devices, or fail under CI=true).
system-deps:
	@missing=""; \
	ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || missing="$$missing mesa-vulkan-drivers"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "note: not root, cannot install$$missing (WebGPU/browser tests will skip)"; fi; \
	fi

models: setup
	$(PY) build_scripts/fetch_models.py

web: setup web-deps models
	$(PY) build_scripts/build_web.py

# The pinned npm pyodide package (web/package-lock.json) that the browser bundle and tests use.
web-deps:
	@test -f web/node_modules/pyodide/package.json || npm ci --prefix web --no-audit --no-fund

bench: setup
	$(PY) benchmarks/ops_cpu.py

# Benchmark peers too heavy for `make test` (never part of setup or test): llama-cpp-python,
# compiled from its sdist (needs cmake and a C++ compiler; ~8 min on 2 cores), for
# benchmarks/llamacpp_roundtrip.py.
peers: setup
	$(PY) -m pip install --no-binary llama-cpp-python 'llama-cpp-python==0.3.36'

wheel: setup
	$(PY) -m build --wheel --outdir dist .

clean:
	rm -rf build dist *.egg-info .pytest_cache
