# collsynth: `make run` runs the main job, `make test` the whole suite (lint, types, tests).
# Both create .venv on first use: `run` installs the package with its runtime dependencies only,
# `test` adds the test extras (requirements-test.txt: the CPU torch wheel, pytest, hypothesis,
# matplotlib, mypy, ruff, the NCCL wheel for the compile tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test lint bench mutation schedules clean

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --disable-pip-version-check -e .
	touch $@

$(TEST_STAMP): $(RUN_STAMP) requirements-test.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-test.txt
	touch $@

run: $(RUN_STAMP)
	$(BIN)/collsynth compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms

# mypy sees the package under its import name through build/typecheck/collsynth -> the repository root
TYPECHECK := build/typecheck
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	mkdir -p $(TYPECHECK) && ln -sfn ../.. $(TYPECHECK)/collsynth
	cd $(TYPECHECK) && MYPYPATH=. ../../$(BIN)/mypy --config-file ../../pyproject.toml --explicit-package-bases \
	    $$(cd ../.. && find . -name '*.py' -not -path './.venv/*' -not -path './build/*' -not -path './tests/*' \
	         -not -path './bench/*' | sed 's|^\./|collsynth/|' | sort)

test: lint
	$(BIN)/python -m pytest -n auto --dist worksteal

bench: $(TEST_STAMP)
	$(BIN)/python bench/run_all.py

# opt-in, long (hours for every target on 2 cores): MUTATION_ARGS="--targets verify,ir,msccl-check" for the subset
MUTATION_STAMP := $(VENV)/.installed-mutation
$(MUTATION_STAMP): $(TEST_STAMP) requirements-mutation.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-mutation.txt
	touch $@

mutation: $(MUTATION_STAMP)
	$(BIN)/python bench/mutation.py $(MUTATION_ARGS)

schedules: $(RUN_STAMP)
	$(BIN)/collsynth schedules regenerate

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
