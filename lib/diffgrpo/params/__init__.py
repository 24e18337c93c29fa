"""A study's parameters: layered YAML files (``params/``) validated into one :class:`Config`.

- :mod:`.schema`: the sections and their keys (pydantic), loading and the cross-key checks;
- :mod:`.files`: reading the YAML layers (``include:``, ``--set`` overrides, plugins);
- :mod:`.cluster`: the ``cluster:`` section (what each job asks a Slurm cluster for).

``diffgrpo.params`` is the public name: ``params.load("embedded")`` gives a study's Config.
"""

from diffgrpo import lazy_names

#: each public name and the submodule that defines it, imported on first use (PEP 562): a study's
#: notebook job processes import :mod:`.stages` alone and skip pydantic and pandas
_PUBLIC = {
    "STAGES": "stages",
    **dict.fromkeys(("DEFAULTS_FILE", "ParamsError", "load_plugin", "params_dir", "parse_overrides",
                     "read_yaml_value", "resolve"), "files"),
    **dict.fromkeys(("DERIVED_GRPO_OPTIONS", "NAMED_ARMS", "SAFE_NAME", "TEST_SET", "TREATMENTS", "AnalyzeConfig",
                     "ArmConfig", "Config", "DatasetConfig", "EvalSetConfig", "EvaluateConfig", "LevelParams",
                     "ModelConfig", "ProbeConfig", "TrainConfig", "bare_arm", "budget_size", "build", "dump", "get",
                     "load"), "schema"),
}
__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
