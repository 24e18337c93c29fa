"""environment.yml and pyproject.toml list the same packages, at the same versions."""

import re
import tomllib

import yaml

from diffgrpo.artifacts import project_root

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
