"""A study's parameters: layered YAML files (``params/``) validated into one :class:`Config`.

- :mod:`.schema`: the sections and their keys (pydantic), loading and the cross-key checks;
- :mod:`.files`: reading the YAML layers (``include:``, ``--set`` overrides, plugins);
- :mod:`.cluster`: the ``cluster:`` section (what each job asks a Slurm cluster for).

``diffgrpo.params`` is the public name: ``params.load("embedded")`` gives a study's Config.
"""

from .cluster import STAGES
from .files import DEFAULTS_FILE, ParamsError, load_plugin, params_dir, parse_overrides, read_yaml_value, resolve
from .schema import (DERIVED_GRPO_OPTIONS, NAMED_ARMS, SAFE_NAME, TEST_SET, TREATMENTS, AnalyzeConfig, ArmConfig,
                     Config, DatasetConfig, EvalSetConfig, EvaluateConfig, LevelParams, ModelConfig, ProbeConfig,
                     TrainConfig, bare_arm, budget_size, build, dump, get, load)

__all__ = ["DEFAULTS_FILE", "DERIVED_GRPO_OPTIONS", "NAMED_ARMS", "SAFE_NAME", "TEST_SET", "TREATMENTS",
           "AnalyzeConfig", "ArmConfig", "Config", "DatasetConfig", "EvalSetConfig", "EvaluateConfig", "LevelParams",
           "ModelConfig", "ParamsError", "ProbeConfig", "STAGES", "TrainConfig", "bare_arm", "budget_size", "build", "dump",
           "get", "load", "load_plugin", "params_dir", "parse_overrides", "read_yaml_value", "resolve"]
