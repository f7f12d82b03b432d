# Two commands a newcomer needs: `make run` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck pytest proofs bench docs clean

# torch is pinned to the CPU wheel first (a plain `torch` would pull a multi-GB CUDA build);
# the project's own requirement range is then already satisfied.
$(STAMP): pyproject.toml setup.py cvfl_theory/_kernels.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[dev,docs]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/cvfl verify

test: $(STAMP) lint typecheck pytest proofs docs

lint: $(STAMP)
	$(BIN)/ruff check cvfl_theory cvfl_sim proofs_checks tests benchmarks docs
	$(BIN)/ruff format --check cvfl_theory cvfl_sim proofs_checks tests benchmarks docs

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

proofs: $(STAMP)
	$(BIN)/python -m proofs_checks

bench: $(STAMP)
	@status=0; for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || status=1; echo; done; exit $$status

# A fresh build every time: an incremental one would not repeat the warnings (-W) of unchanged
# pages, and could keep stale pages. Then no page may load a script or style from the network.
docs: $(STAMP)
	rm -rf docs/_build/html docs/_build/doctrees
	$(BIN)/sphinx-build -W --keep-going -q -b html -d docs/_build/doctrees docs docs/_build/html
	$(BIN)/python docs/check_offline.py docs/_build/html
	@if grep -rlI "THEORY\.md" docs/_build/html; then \
		echo "the pages above cite THEORY.md, a file users do not have"; exit 1; fi

clean:
	rm -rf $(VENV) docs/_build docs/auto_examples .pytest_cache .mypy_cache .ruff_cache
