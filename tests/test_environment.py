"""environment.yml and pyproject.toml list the same packages, at the same versions; the GPU
environment's requirements-gpu.txt lists them too, differing only where vLLM needs it."""

import re
import tomllib

import yaml

from diffgrpo.store.artifacts import project_root

ROOT = project_root()


def _name(req: str) -> str:
    return re.split(r"[\[=<>~! ]", req, maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r for r in project["dependencies"] + project["optional-dependencies"]["test"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {_name(r): r for r in pip if not r.startswith("-e")}
    assert listed == wanted


def test_gpu_extra_is_separate_and_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(_name(r) == "vllm" for r in project["dependencies"])
    assert project["optional-dependencies"]["gpu"] == ["vllm==0.31.0"]
    assert "torch==2.13.0" in project["dependencies"]


# packages whose GPU-environment pin differs from pyproject.toml's, and why (requirements-gpu.txt)
GPU_OVERRIDES = {
    "transformers": "transformers==5.17.0",  # vllm 0.31.0: transformers>=5.10.4,<5.18.0
    "numpy": "numpy==2.3.5",  # mistral_common (a vllm 0.31.0 dependency): numpy<2.4 on Python <= 3.12
}


def _requirements(path):
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {_name(r): r for r in lines if r}


def test_gpu_requirements_match_pyproject_but_for_vllm_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cpu = {_name(r): r for r in project["dependencies"] + project["optional-dependencies"]["test"]}
    gpu = _requirements(ROOT / "requirements-gpu.txt")
    assert set(gpu) == set(cpu) | {"vllm"}
    assert gpu["vllm"] == project["optional-dependencies"]["gpu"][0]
    assert {n: r for n, r in gpu.items() if n != "vllm" and r != cpu[n]} == GPU_OVERRIDES
