# nodeagent: `make demo` runs it, `make test` tests it; both set everything up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup demo sample test lint typecheck link-tree system-deps bench proto deb deb-lock clean

# setuptools ends every editable install with a notice (a warning, "Editable installation.",
# whatever the editable mode) that pip shows even with -q: that one is ignored by its message;
# every other warning and every error still shows (tests/test_make_setup.py).
SETUP_WARNINGS := ignore:Editable installation:UserWarning

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PYTHONWARNINGS="$(SETUP_WARNINGS)" $(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job: a collector, this machine's agent and two simulated 8-GPU rentals; what nodeagent finds.
demo: setup
	$(BIN)/nodeagent-collector demo

# Debian tools the live tests use (fio, iperf3, iproute2, node_exporter); root only.
system-deps:
	@.ci/system-deps

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# `nodeagent` spans several top-level folders (pyproject's package-dir), which mypy cannot map
# and the editable install's import hook hides from it: one linked package under build/src.
link-tree:
	@.ci/link-tree

typecheck: setup link-tree
	$(BIN)/mypy
	$(BIN)/mypy packaging/deb/build.py packaging/deb/lock.py
	$(BIN)/mypy --python-version 3.10 packaging/deb/make_environment.py  # postinst runs it with any python3

test: setup system-deps lint typecheck
	$(BIN)/pytest -n 4 --dist loadgroup -m "not alone" --durations=15
	$(BIN)/pytest -m alone --durations=0

bench: setup system-deps
	$(BIN)/python bench/agent_overhead.py
	$(BIN)/python bench/detector_accuracy.py

proto: setup
	$(BIN)/python proto/generate.py

# dist/nodeagent_<version>_<arch>.deb (packaging/README.md); needs dpkg-dev, git and python3 >= 3.11.
deb: setup
	$(BIN)/python packaging/deb/build.py --out dist

# Re-pin the .deb's dependencies and its pip from this environment (after changing pyproject.toml).
deb-lock: setup
	$(BIN)/python packaging/deb/lock.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
