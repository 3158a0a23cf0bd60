# collsynth: `make run` runs the main job, `make test` the whole suite.
# Both create .venv and install the project on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench clean schedules

$(STAMP): pyproject.toml requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-test.txt
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/collsynth compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

schedules: $(STAMP)
	$(BIN)/collsynth schedules regenerate

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
