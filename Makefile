# The two commands: `make study` (the whole study on the embedded default, CPU) and
# `make test`. Each does its own set-up on a fresh machine; a second run skips what is done.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
STUDY  ?= embedded
KERNEL := diffgrpo

.PHONY: study test test-all setup references clean-outputs lab gpu-env

setup: $(STAMP)

# torch==2.13.0 first: on a CPU machine pip takes the CPU build from local disk; an
# unpinned torch would pull a multi-GB CUDA build. The project itself pins the same version.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "diffgrpo (.venv)" >/dev/null
	rm -f $(VENV)/.installed-*
	touch $@

## the whole study on params/$(STUDY).yaml (the embedded default: CPU, minutes)
study: $(STAMP)
	$(PY) -m diffgrpo.study $(STUDY)

## the tests, notebooks end to end on a tiny setting included (no `slow` marker)
test: $(STAMP)
	$(PY) -m pytest -m "not slow" -q -p no:cacheprovider

## every test, the slow ones too
test-all: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

## re-execute the tiny notebooks that nbval compares against (see tests/notebooks/README.md)
references: $(STAMP)
	$(PY) tests/notebooks/refresh.py

## JupyterLab on this project's kernel
lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

## a GPU machine: vLLM needs transformers < 5.18 (see README, "GPU environment")
gpu-env:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[test,gpu]' 'transformers>=5.17,<5.18'
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "diffgrpo (.venv)"

clean-outputs:
	find outputs -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
