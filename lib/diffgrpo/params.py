"""Run parameters: layered YAML validated into typed config objects.

A run is fully described by YAML files in ``params/``, applied in order:

1. ``params/defaults.yaml``: every parameter, with a comment on where its value comes from;
2. the study file(s), e.g. ``params/embedded.yaml`` (a study file may name more files to
   layer underneath it with ``include: [other.yaml]``);
3. overrides from the command line or a notebook's ``parameters`` cell, as a nested dict or
   dotted keys (``{"train.max_steps": 20}``).

Every layer is checked against the schema below: an unknown or misspelled key, a value of
the wrong type or out of range is a :class:`ParamsError` that names the file and the key.
Nothing is silently defaulted: ``defaults.yaml`` must set every key, and the effective value
of every parameter is written beside each run's outputs (:func:`Config.to_dict`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from .artifacts import checkout_root


class ParamsError(ValueError):
    """A parameter file or override that does not fit the schema."""


def _spec(lo: float | None = None, hi: float | None = None, doc: str = "") -> dict[str, Any]:
    return {"lo": lo, "hi": hi, "doc": doc}


def _f(default: Any = dataclasses.MISSING, *, lo=None, hi=None, doc: str = "", factory=None):
    """A schema field with an inclusive range check (``lo``/``hi``) and a doc line."""
    meta = _spec(lo, hi, doc)
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# ------------------------------------------------------------------------------------
# Schema. Defaults here are only placeholders for typing: the values a run uses come from
# params/defaults.yaml, which must set every key (checked by `load`).
# ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    name: str = _f("embedded", doc="short id used in artifact paths; probes are keyed by it")
    path: str = _f("embedded", doc="'embedded' (the packaged default), a local folder or a hub id")
    gguf_file: str | None = _f(None, doc="GGUF file name inside `path` (transformers gguf_file=)")
    dtype: Literal["float32", "bfloat16", "float16"] = _f("float32")
    torch_threads: int | None = _f(None, lo=1, doc="CPU threads for torch (null: torch's default)")
    device: Literal["cpu", "cuda"] = _f("cpu", doc="where the model runs in every stage (probe, train, evaluate)")
    chat_template_kwargs: dict[str, Any] = _f(
        factory=dict, doc="extra arguments of the chat template in every stage, e.g. {enable_thinking: false} (Qwen3)")


@dataclass(frozen=True)
class DatasetConfig:
    task: str = _f("shuffled_objects", doc="a name from diffgrpo.tasks.names()")
    task_options: dict[str, Any] = _f(factory=dict, doc="keyword options of the task")
    source: str | None = _f(None, doc="hub | offline | path to a local file | null (auto)")
    train_split: str = _f("train")
    test_split: str = _f("test")
    pool_size: int | None = _f(None, lo=1, doc="a seeded sample of N train rows (null: all)")
    test_size: int | None = _f(None, lo=1, doc="a seeded sample of N test rows (null: all)")


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings shared by probe and evaluation."""

    temperature: float = _f(1.0, lo=0.0, hi=10.0)
    top_p: float = _f(1.0, lo=0.0, hi=1.0)
    max_new_tokens: int = _f(64, lo=1)
    batch_size: int = _f(64, lo=1, doc="sequences per forward batch")


@dataclass(frozen=True)
class ProbeConfig:
    k: int = _f(8, lo=1, doc="completions per pool prompt (003: 5 GSM8K, 10 shuffled objects)")
    sampling: SamplingConfig = _f(factory=SamplingConfig)
    one_sample: bool = _f(True, doc="also run the one-sample base-wrong/base-right probe (001)")
    seed: int = _f(0, lo=0)


@dataclass(frozen=True)
class SelectConfig:
    """What every arm's selection shares; an arm may set its own budget or max_tier."""

    budget_frac: float | None = _f(0.1, lo=0.0, hi=1.0, doc="floor(frac * |pool|) prompts")
    budget_count: int | None = _f(None, lo=1, doc="an exact count instead of a fraction")
    seed: int = _f(0, lo=0, doc="seed of tie-breaking shuffles and of `random`")
    max_tier: int | None = _f(None, doc="`tiers`: keep prompts with tier <= max_tier")
    tier_bins: list[float] = _f(
        factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0], doc="p_hat bin edges when tiers come from p_hat"
    )


@dataclass(frozen=True)
class LoraParams:
    r: int = _f(16, lo=1)
    alpha: int = _f(32, lo=1)
    dropout: float = _f(0.0, lo=0.0, hi=1.0)
    target_modules: list[str] = _f(
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass(frozen=True)
class DynamicSamplingParams:
    """DAPO's dynamic sampling (verl's ``filter_groups``), built on TRL in :mod:`diffgrpo.train`."""

    enabled: bool = _f(False, doc="drop groups whose rewards are all equal and generate more until the update "
                       "holds prompts_per_step mixed groups or max_rounds rounds were generated")
    max_rounds: int = _f(4, lo=1, doc="generation rounds per update at most (the first included)")


@dataclass(frozen=True)
class LengthRewardParams:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476, eq. 13), added to the
    verifier's reward with ``weight``; L_max is the run's (or level's) max_completion_length."""

    weight: float = _f(0.0, lo=0.0, doc="multiplies the penalty (0: no length reward)")
    cache: int = _f(16, lo=1, doc="DAPO's L_cache: the penalty ramps from 0 to -1 over the last `cache` tokens "
                    "before max_completion_length")


@dataclass(frozen=True)
class TrainConfig:
    seeds: list[int] = _f(factory=lambda: [0], doc="one run per seed and arm")
    max_steps: int = _f(1000, lo=1)
    prompts_per_step: int = _f(32, lo=1)
    group_size: int = _f(8, lo=2, doc="completions per prompt (GRPO's G)")
    learning_rate: float = _f(3e-5, lo=0.0)
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = _f("cosine")
    warmup_ratio: float = _f(0.0, lo=0.0, hi=1.0)
    weight_decay: float = _f(0.0, lo=0.0)
    max_grad_norm: float = _f(1.0, lo=0.0)
    beta: float = _f(0.1, lo=0.0, doc="KL coefficient against the initial model (adapter off)")
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = _f("grpo")
    scale_rewards: Literal["group", "batch", "none"] = _f("group")
    epsilon: float = _f(0.2, lo=0.0, doc="lower clip bound")
    epsilon_high: float = _f(0.2, lo=0.0, doc="upper clip bound")
    num_iterations: int = _f(1, lo=1, doc="policy updates per generation batch (GRPO's mu)")
    mask_truncated_completions: bool = _f(False)
    max_prompt_length: int | None = _f(None, lo=1)
    max_completion_length: int = _f(256, lo=1)
    temperature: float = _f(1.0, lo=0.0)
    top_p: float = _f(1.0, lo=0.0, hi=1.0)
    save_steps: int = _f(100, lo=1, doc="adapter checkpoint every N steps (and at the end)")
    logging_steps: int = _f(1, lo=1)
    report_to: Literal["tensorboard", "trackio", "wandb", "mlflow", "none"] = _f(
        "tensorboard", doc="TRL's report_to: where each step's metrics also go (tensorboard: event files in the "
        "run's folder, runs/<run>/tensorboard/); not part of a run's key")
    lora: LoraParams = _f(factory=LoraParams)
    per_device_prompts: int | None = _f(
        None, lo=1, doc="prompts per process per forward/backward pass (null: the process's whole share of "
        "prompts_per_step); the rest is gradient accumulation (diffgrpo.devices.batching)")
    bf16: bool = _f(False)
    gradient_checkpointing: bool = _f(False)
    merge_lora_for_generation: bool = _f(True, doc="TRL's HF generation runs with the LoRA merged into the "
                                         "base weights (diffgrpo.train.merged_lora)")
    use_vllm: bool = _f(False, doc="TRL generates with vLLM (GPU environment only)")
    vllm_mode: Literal["colocate", "server"] = _f("colocate", doc="TRL's vllm_mode")
    vllm_gpu_memory_utilization: float = _f(0.3, lo=0.0, hi=1.0, doc="colocate: GPU memory share of vLLM")
    vllm_tensor_parallel_size: int = _f(1, lo=1, doc="colocate: GPUs per vLLM engine")
    dynamic_sampling: DynamicSamplingParams = _f(factory=DynamicSamplingParams)
    length_reward: LengthRewardParams = _f(factory=LengthRewardParams)
    max_completions: int | None = _f(None, lo=1, doc="a budget of generated completions: the run stops at the "
                                     "first step that reaches it (null: max_steps steps only)")


@dataclass(frozen=True)
class LevelParams:
    """One level of paper 002's EPRLI curriculum (its symbols in brackets; docs/paper002.md)."""

    name: str = _f("", doc="the level's name in records")
    p_hat: list[float] | None = _f(None, doc="data D_l: pool prompts whose probe p_hat lies in [lo, hi]")
    tiers: list[int] | None = _f(None, doc="data D_l: pool prompts of these dataset tiers (instead of p_hat)")
    prompts: int = _f(1, lo=1, doc="prompts of D_l in the selection (a seeded draw from the band)")
    steps: int = _f(1, lo=1, doc="updates of this level; the levels' steps sum to train.max_steps")
    max_completion_length: int = _f(1, lo=1, doc="Len_l_max")
    epsilon: float = _f(0.2, lo=0.0, doc="eps_l_low")
    epsilon_high: float = _f(0.2, lo=0.0, doc="eps_l_high")
    group_size: int = _f(2, lo=2, doc="G_l")
    buffer_size: int = _f(1, lo=1, doc="N_l: mixed groups an update holds (the level's prompts per step)")
    dynamic_sampling: bool = _f(True, doc="fill the buffer with mixed groups only (train.dynamic_sampling.max_rounds)")
    length_reward_weight: float = _f(0.0, lo=0.0, doc="K_l: weight of the length reward (train.length_reward)")


@dataclass(frozen=True)
class EprliConfig:
    """Paper 002's curriculum: the strategies ``eprli`` (levels in order), ``eprli_grpo`` (the
    same prompts, one level with train.*) and ``eprli_dynamic`` (the same, with dynamic sampling)."""

    levels: list[LevelParams] = _f(factory=list, doc="the levels in training order (L = len(levels))")
    seed: int = _f(0, lo=0, doc="seed of the draw of each level's prompts from its band")


@dataclass(frozen=True)
class GenerationBackendConfig:
    """The generator of the probe and of evaluation (training generates through TRL)."""

    backend: Literal["hf", "vllm"] = _f("hf", doc="hf: transformers generate; vllm: the GPU environment's vLLM")
    vllm_gpu_memory_utilization: float = _f(0.9, lo=0.0, hi=1.0, doc="share of GPU memory vLLM may take")
    vllm_tensor_parallel_size: int = _f(1, lo=1, doc="GPUs one vLLM engine spans")
    vllm_max_model_len: int | None = _f(None, lo=1, doc="context length vLLM reserves (null: the model's)")


@dataclass(frozen=True)
class EvalSetConfig:
    """An evaluation set besides the held-out test set of the training task (which is always
    scored, as set ``test``). A null field takes the training dataset's value (``task``,
    ``task_options`` and ``source`` (none when ``task`` is another task), ``size``: ``dataset.*``;
    ``split``: ``dataset.test_split``) or
    the evaluation's (``greedy``, ``n_samples``, ``pass_k``, ``max_new_tokens``: ``evaluate.*``)."""

    name: str = _f("", doc="the set's name in file paths and tables (not `test`)")
    description: str = _f("", doc="what the set measures, in words (OOD, transfer, a subset...)")
    task: str | None = _f(None, doc="a name from diffgrpo.tasks.names() (null: dataset.task)")
    task_options: dict[str, Any] | None = _f(None, doc="the task's options (null: dataset.task_options)")
    source: str | None = _f(None, doc="hub | offline | a local file (null: dataset.source, or the task's "
                                     "default when `task` is another task)")
    split: str | None = _f(None, doc="the split scored (null: dataset.test_split)")
    size: int | None = _f(None, lo=1, doc="a seeded sample of N rows (null: dataset.test_size)")
    greedy: bool | None = _f(None, doc="greedy accuracy (null: evaluate.greedy)")
    n_samples: int | None = _f(None, lo=0, doc="sampled completions per prompt (null: evaluate.n_samples)")
    pass_k: list[int] | None = _f(None, doc="k values of pass@k (null: evaluate.pass_k)")
    max_new_tokens: int | None = _f(None, lo=1, doc="(null: evaluate.sampling.max_new_tokens)")


@dataclass(frozen=True)
class EvaluateConfig:
    greedy: bool = _f(True, doc="greedy accuracy (temperature 0, one completion)")
    n_samples: int = _f(8, lo=0, doc="sampled completions per test prompt (0: none)")
    pass_k: list[int] = _f(factory=lambda: [1, 8], doc="k values of the unbiased pass@k")
    sampling: SamplingConfig = _f(factory=SamplingConfig)
    checkpoints: Literal["all", "final"] = _f("all")
    seed: int = _f(1234, lo=0)
    sets: list[EvalSetConfig] = _f(factory=list, doc="evaluation sets scored besides the held-out test set")


@dataclass(frozen=True)
class AnalyzeConfig:
    metric: Literal["greedy_acc", "pass@1"] = _f("greedy_acc", doc="the accuracy tables report")
    reports: list[str] = _f(factory=lambda: ["003"], doc="the papers whose report to write, each beside its "
                            "reported numbers (diffgrpo.reports): \"003\", \"001\", \"000\"; quoted, as YAML reads 003 as 3")
    compare: list[str] = _f(factory=list, doc="other studies (params files, by name or path) drawn beside this one "
                            "in one report: 003's Table 1 grid over models x datasets, 000's transfer across "
                            "training datasets (diffgrpo.reports.grid); run each first")
    bootstrap: int = _f(2000, lo=100, doc="resamples of the intervals (test prompts x seeds, and runs for R^2)")
    seed: int = _f(0, lo=0, doc="seed of the bootstrap's resampling")


@dataclass(frozen=True)
class ArmConfig:
    """One arm of the study: a selection policy with its options and, where they differ from
    ``train``, its own training settings. In a params file an arm is a mapping, or a bare
    policy name (``hard`` is ``{name: hard, policy: hard}``). A null budget or max_tier is the
    study's (``select.*``); an arm that sets budget_frac or budget_count sets both."""

    name: str = _f("", doc="the arm's name: its runs are <name>-seed<seed>, its selection select/<name>.parquet")
    policy: str = _f("", doc="a policy of diffgrpo.select.STRATEGIES (hard, easy, middle, random, ...)")
    budget_frac: float | None = _f(None, lo=0.0, hi=1.0, doc="(null: select.budget_frac)")
    budget_count: int | None = _f(None, lo=1, doc="(null: select.budget_count)")
    max_tier: int | None = _f(None, doc="`tiers`: keep prompts with tier <= max_tier (null: select.max_tier)")
    train: dict[str, Any] = _f(factory=dict, doc="train.* settings of this arm that differ from the study's")


@dataclass(frozen=True)
class Config:
    study: str = _f("embedded", doc="name of the study; outputs go to outputs/<study>/")
    description: str = _f("", doc="what this params set reproduces, in words")
    seed: int = _f(0, lo=0)
    workers: int = _f(1, lo=1, doc="training / evaluation runs at once, each in its own process "
                      "(a CPU: up to one per core with model.torch_threads 1; one GPU: 1)")
    model: ModelConfig = _f(factory=ModelConfig)
    dataset: DatasetConfig = _f(factory=DatasetConfig)
    probe: ProbeConfig = _f(factory=ProbeConfig)
    arms: list[ArmConfig] = _f(factory=lambda: [ArmConfig(name=p, policy=p) for p in ("hard", "easy", "middle", "random")],
                               doc="the study's arms, each trained with every seed of train.seeds")
    select: SelectConfig = _f(factory=SelectConfig)
    generation: GenerationBackendConfig = _f(factory=GenerationBackendConfig)
    train: TrainConfig = _f(factory=TrainConfig)
    eprli: EprliConfig = _f(factory=EprliConfig)
    evaluate: EvaluateConfig = _f(factory=EvaluateConfig)
    analyze: AnalyzeConfig = _f(factory=AnalyzeConfig)
    cluster: dict[str, Any] = _f(factory=lambda: _cluster_schema()().model_dump(), doc="resources of each notebook "
                                 "job on a Slurm cluster; its schema is diffgrpo.cluster.ClusterConfig (pydantic)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **overrides: Any) -> "Config":
        """A copy with dotted-key overrides applied and validated."""
        return build(_merge(self.to_dict(), _expand(overrides, "overrides"), {}, "overrides"))

    # ---- arms and evaluation sets: the one translation of each into a run's settings ----
    def arm(self, name: str) -> ArmConfig:
        for a in self.arms:
            if a.name == name:
                return a
        raise ParamsError(f"no arm {name!r} in study {self.study!r}; its arms: {[a.name for a in self.arms]}")

    def for_arm(self, name: str) -> "Config":
        """The settings one arm's runs train with: ``train`` with the arm's own settings on top
        (``self`` when it has none, so an arm without overrides keeps the study's run keys; else
        a copy whose only arm is this one)."""
        arm = self.arm(name)
        if not arm.train:
            return self
        # the arm's settings moved into `train`; the copy holds that one arm, its settings applied
        return self.replace(train=dict(arm.train), arms=[{**dataclasses.asdict(arm), "train": {}}])

    def eval_set_names(self) -> list[str]:
        """``test`` (the training task's held-out set), then ``evaluate.sets`` in order."""
        return [TEST_SET] + [s.name for s in self.evaluate.sets]

    def for_eval_set(self, name: str) -> "Config":
        """The settings that score evaluation set ``name``: the dataset and evaluation keys the
        set names replace the study's (``self`` for ``test``), so every stage that reads the
        held-out set (data.load_test, layout.eval_key, evaluate) reads this set instead."""
        if name == TEST_SET:
            return self
        found = [s for s in self.evaluate.sets if s.name == name]
        if not found:
            raise ParamsError(f"no evaluation set {name!r} in study {self.study!r}; its sets: {self.eval_set_names()}")
        s = found[0]
        options = s.task_options
        if options is None and s.task not in (None, self.dataset.task):
            options = {}  # another task's options are not the training task's
        changes: dict[str, Any] = {k: v for k, v in {
            "dataset.task": s.task, "dataset.task_options": options, "dataset.source": s.source,
            "dataset.test_split": s.split, "dataset.test_size": s.size, "evaluate.greedy": s.greedy,
            "evaluate.n_samples": s.n_samples, "evaluate.pass_k": s.pass_k,
            "evaluate.sampling.max_new_tokens": s.max_new_tokens}.items() if v is not None}
        if s.task not in (None, self.dataset.task) and s.source is None:
            changes["dataset.source"] = None  # nor is the training data's file or hub choice
        changes["evaluate.sets"] = []  # a set's own settings hold no further sets
        return self.replace(**changes)


def _cluster_schema():
    from .cluster import ClusterConfig  # imported late: diffgrpo.cluster imports this module's error

    return ClusterConfig


#: the name of the held-out test set of the training task among the evaluation sets
TEST_SET = "test"
#: keys that moved, with where to: named in the error instead of a bare "unknown key"
MOVED = {
    "select.strategies": "the top-level `arms:` (a list of arms; `arms: [hard, easy, middle, random]` is "
                         "today's default, see params/defaults.yaml)",
    "train.strategies": "the top-level `arms:` (list only the arms to train)",
    "analyze.paper": '`analyze.reports` (a list of papers, quoted: ["003"])',
}


# ------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------

PARAMS_DIR_NAME = "params"
DEFAULTS_FILE = "defaults.yaml"


def params_dir() -> Path:
    return checkout_root() / PARAMS_DIR_NAME


def resolve(path: str | Path) -> Path:
    """A params file by path, or by bare name inside params/ (``embedded`` -> params/embedded.yaml)."""
    p = Path(path)
    candidates = [p, params_dir() / p, params_dir() / f"{p}.yaml"]
    for c in candidates:
        if c.is_file():
            return c
    raise ParamsError(f"params file not found: {path} (looked in {', '.join(map(str, candidates))})")


def load(*files: str | Path, overrides: dict[str, Any] | None = None, defaults: bool = True) -> Config:
    """Layer ``defaults.yaml``, then ``files`` in order, then ``overrides``; validate."""
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}  # dotted key -> file that set it
    layers = [resolve(DEFAULTS_FILE)] if defaults else []
    for f in files:
        layers.extend(_with_includes(resolve(f), seen=set()))
    for path in layers:
        merged = _merge(merged, _read_yaml(path), origin, str(path))
    if defaults:
        _require_complete(merged, origin)
    overrides = _overrides_mapping(overrides)
    if overrides:
        merged = _merge(merged, _expand(overrides, "overrides"), origin, "overrides")
    return build(merged, origin)


def _overrides_mapping(overrides: Any) -> dict[str, Any] | None:
    """``overrides`` as a mapping. papermill's ``-p overrides ...`` hands a notebook a string:
    one that reads as a YAML mapping (``'{train.max_steps: 3}'``) is taken as that mapping;
    anything else is an error saying how to pass it."""
    if overrides is None or isinstance(overrides, dict):
        return overrides
    if isinstance(overrides, str):
        try:
            parsed = yaml.safe_load(overrides)
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        if not overrides.strip():
            return None
    raise ParamsError(
        f"overrides = {overrides!r}: expected a mapping of dotted keys to values, got {type(overrides).__name__}; "
        "with papermill pass it as YAML, e.g. -y 'overrides: {train.max_steps: 3}' or "
        "-p overrides '{train.max_steps: 3}'; in Python, overrides={\"train.max_steps\": 3}")


def build(data: dict[str, Any], origin: dict[str, str] | None = None) -> Config:
    origin = origin or {}
    cfg = _convert(Config, data, "", origin)
    _check_consistent(cfg, origin)
    return cfg


def get(cfg: Config, dotted: str) -> Any:
    """The value at a dotted key, e.g. ``get(cfg, "train.max_steps")``."""
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _check_consistent(cfg: Config, origin: dict[str, str]) -> None:
    """Checks across keys, so a study fails here rather than inside a notebook stage."""
    from .select import STRATEGIES  # the strategies' owner; imported late (select imports this module)

    def fail(key: str, message: str) -> None:
        where = origin.get(key) or origin.get(key.split("[")[0], "params")  # a list item: the list's file
        raise ParamsError(f"{where}: `{key}` {message}")

    for key in PATH_KEYS:
        why = check_safe_name(get(cfg, key), key)
        if why:
            fail(key, why)
    for key in ("train.seeds", "evaluate.pass_k"):
        values = get(cfg, key) or []
        dup = sorted({v for v in values if values.count(v) > 1}, key=str)
        if dup:
            fail(key, f"lists {dup} more than once; each run must have its own folder and one writer")
    if cfg.select.budget_frac is None and cfg.select.budget_count is None:
        fail("select.budget_frac", "and select.budget_count are both null; set one")
    bad = [k for k in cfg.evaluate.pass_k if not 1 <= k <= cfg.evaluate.n_samples]
    if bad:
        fail("evaluate.pass_k", f"has k = {bad}; pass@k needs 1 <= k <= evaluate.n_samples = {cfg.evaluate.n_samples}")
    from . import cluster

    cluster.check(cfg.cluster, origin.get)
    _check_arms(cfg, fail)
    _check_eval_sets(cfg, fail)
    _check_levels(cfg, fail)
    from .reports import PAPERS

    unknown = [r for r in cfg.analyze.reports if r not in PAPERS]
    if unknown or len(set(cfg.analyze.reports)) != len(cfg.analyze.reports):
        fail("analyze.reports", f"= {cfg.analyze.reports}: each of {list(PAPERS)} at most once")
    if len(set(cfg.analyze.compare)) != len(cfg.analyze.compare):
        fail("analyze.compare", f"= {cfg.analyze.compare} names a study more than once")
    for entry in cfg.analyze.compare:
        try:
            resolve(entry)
        except ParamsError as err:
            fail("analyze.compare", f"names {entry!r}, which is not a params file: {err}")


#: a name that is safe as a folder and file name, and cannot be read as another run's id
_NAME = re.compile(r"[A-Za-z0-9_.]+")
#: the one rule for every value that becomes a part of a path under the outputs root: a letter
#: or digit, then letters, digits, `.`, `_` or `-`, 100 characters at most (so never empty,
#: `.`, `..`, absolute, hidden or holding a `/`)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: the keys whose values become path parts (arms, evaluation sets and EPRLI levels are checked
#: with their lists: :func:`_check_arms`, :func:`_check_eval_sets`, :func:`_check_levels`)
PATH_KEYS = ("study", "model.name", "dataset.task", "dataset.train_split")


def check_safe_name(value: Any, key: str) -> str | None:
    """Why ``value`` cannot be a path part (None when it can): :data:`SAFE_NAME`."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
        shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
        return (f"= {shown!r} cannot name a folder: `{key}` becomes a path part under the outputs root, so it "
                "must be a letter or digit followed by letters, digits, `.`, `_` or `-`, at most 100 "
                "characters (no `/`, no leading `.`, not empty)")
    return None


def _check_arms(cfg: Config, fail) -> None:
    from .select import BUDGETED, STRATEGIES  # the policies' owner; imported late (select imports this module)

    if not cfg.arms:
        fail("arms", "is empty; a study trains at least one arm, e.g. `arms: [hard, easy, middle, random]`")
    names = [a.name for a in cfg.arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        fail("arms", f"names {dup} more than once; each arm's runs must have their own folders")
    for i, a in enumerate(cfg.arms):
        where = f"arms[{i}] ({a.name or 'no name'})"
        if not _NAME.fullmatch(a.name) or not SAFE_NAME.fullmatch(a.name) or a.name == "base":
            fail("arms", f"{where}: name {a.name!r} must be a letter or digit, then letters, digits, `_` or `.`, "
                         "at most 100 characters, and not `base` (it names the arm's folders; `-` separates the seed)")
        if a.policy not in STRATEGIES:
            fail("arms", f"{where}: unknown policy {a.policy!r}; known: {list(STRATEGIES)}")
        if (a.budget_frac is not None or a.budget_count is not None) and a.policy not in BUDGETED:
            fail("arms", f"{where}: policy {a.policy!r} is defined by a set, not a size; drop budget_frac/budget_count "
                         f"(budgeted policies: {list(BUDGETED)})")
        if a.max_tier is not None and a.policy != "tiers":
            fail("arms", f"{where}: max_tier applies to policy `tiers` only, not {a.policy!r}")
        moved = sorted(set(a.train) & {"seeds"})
        if moved:
            fail("arms", f"{where}: train.{moved[0]} is the study's (train.seeds), not an arm's")
        try:
            arm_cfg = cfg.for_arm(a.name)
        except ParamsError as err:
            fail("arms", f"{where}: its train settings do not validate: {err}")
        if a.policy in BUDGETED and cfg.dataset.pool_size is not None:
            _check_budget(cfg, a, arm_cfg.train.prompts_per_step, where, fail)


def _check_budget(cfg: Config, a: ArmConfig, per_step: int, where: str, fail) -> None:
    """A budget that selects no prompt or more than the pool, found here (with the key that
    sets it) rather than inside the select stage (fewer prompts than ``train.prompts_per_step``
    is the train stage's error: a config may be loaded for other work than training)."""
    own = a.budget_frac is not None or a.budget_count is not None
    frac, count = (a.budget_frac, a.budget_count) if own else (cfg.select.budget_frac, cfg.select.budget_count)
    key = "arms" if own else ("select.budget_count" if count is not None else "select.budget_frac")
    what = f"{where}: " if own else f"(arm {a.name}) "
    pool = cfg.dataset.pool_size
    n = count if count is not None else math.floor(frac * pool)
    setting = f"budget_count = {count}" if count is not None else f"budget_frac = {frac} of dataset.pool_size = {pool}"
    if n < 1:
        fail(key, f"{what}{setting} selects {n} prompts; raise it to at least {math.ceil(max(per_step, 1) / pool * 1e4) / 1e4} "
                  f"(train.prompts_per_step = {per_step} prompts)"
                  if count is None else f"{what}{setting} selects no prompt")
    if n > pool:
        fail(key, f"{what}{setting} selects {n} prompts, more than the pool of dataset.pool_size = {pool}")


def _check_eval_sets(cfg: Config, fail) -> None:
    from .tasks import names as task_names

    names = cfg.eval_set_names()
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        fail("evaluate.sets", f"names {dup} more than once (`{TEST_SET}` is the training task's held-out set)")
    for i, s in enumerate(cfg.evaluate.sets):
        where = f"evaluate.sets[{i}] ({s.name or 'no name'})"
        if not _NAME.fullmatch(s.name) or not SAFE_NAME.fullmatch(s.name):
            fail("evaluate.sets", f"{where}: name {s.name!r} must be a letter or digit, then letters, digits, `_` "
                                  "or `.`, at most 100 characters (it names folders)")
        if s.task is not None and s.task not in task_names():
            fail("evaluate.sets", f"{where}: unknown task {s.task!r}; known tasks: {task_names()}")
        try:
            cfg.for_eval_set(s.name)
        except ParamsError as err:
            fail("evaluate.sets", f"{where}: its settings do not validate: {err}")


def _check_levels(cfg: Config, fail) -> None:
    """The EPRLI levels (paper 002): required by its strategies, each with one data band."""
    from .select import EPRLI  # the strategies that read eprli.levels

    levels = cfg.eprli.levels
    eprli_arms = [a.name for a in cfg.arms if a.policy in EPRLI]
    if eprli_arms and not levels:
        fail("eprli.levels", f"is empty, and arms {eprli_arms} have EPRLI policies, which train on the levels' "
                             "prompts; declare the levels")
    if not levels:
        return
    names = [lv.name for lv in levels]
    if len(set(names)) != len(names) or not all(names):
        fail("eprli.levels", f"names {names}: each level needs its own non-empty name")
    for i, lv in enumerate(levels):
        why = check_safe_name(lv.name, f"eprli.levels[{i}].name")
        if why:
            fail("eprli.levels", why)
    for i, lv in enumerate(levels):
        key = f"eprli.levels[{i}]"
        if (lv.p_hat is None) == (lv.tiers is None):
            fail(key, "sets both or neither of p_hat and tiers; its data is one of them")
        if lv.p_hat is not None and not (len(lv.p_hat) == 2 and 0.0 <= lv.p_hat[0] <= lv.p_hat[1] <= 1.0):
            fail(f"{key}.p_hat", f"= {lv.p_hat}: a band [lo, hi] with 0 <= lo <= hi <= 1")
        if lv.tiers is not None and not lv.tiers:
            fail(f"{key}.tiers", "is empty")
    total = sum(lv.steps for lv in levels)
    if total != cfg.train.max_steps:
        fail("eprli.levels", f"steps add up to {total}, not train.max_steps = {cfg.train.max_steps}; a run's steps "
                             "are its levels' steps")


def dump(cfg: Config) -> str:
    """The effective parameters as YAML (written beside each run's outputs)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last
    silently: a second `evaluate:` block would drop the first)."""


def _no_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dup:
        raise yaml.constructor.ConstructorError(None, None, f"key(s) {dup} given twice in one mapping", node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.load(path.read_text(), Loader=_StrictLoader) or {}
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _with_includes(path: Path, seen: set[Path]) -> list[Path]:
    """``path`` preceded by the files it includes (recursively), each once."""
    if path.resolve() in seen:
        raise ParamsError(f"{path}: include cycle")
    seen.add(path.resolve())
    includes = _read_yaml(path).get("include", [])
    if isinstance(includes, str):
        includes = [includes]
    out: list[Path] = []
    if not isinstance(includes, list) or not all(isinstance(i, str) and i for i in includes):
        raise ParamsError(f"{path}: `include` = {includes!r}: expected a file name or a list of file names")
    for inc in includes:
        here = [path.parent / inc, path.parent / f"{inc}.yaml"]
        found = next((c for c in here if c.is_file()), None)
        if found is None:
            try:
                found = resolve(inc)
            except ParamsError:
                looked = here + [params_dir() / inc, params_dir() / f"{inc}.yaml"]
                raise ParamsError(f"{path}: `include: {inc}` names no file (looked in "
                                  f"{', '.join(map(str, dict.fromkeys(looked)))}); fix the name in {path.name} or "
                                  "add the file") from None
        out.extend(_with_includes(found, seen))
    return out + [path]


def _expand(flat: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"train.max_steps": 5}`` -> ``{"train": {"max_steps": 5}}`` (nested dicts pass through)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if not isinstance(key, str) or not key:
            raise ParamsError(f"{where}: keys must be non-empty strings, got {key!r}")
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamsError(f"{where}: key {key!r} conflicts with another override")
        if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(value)
        else:
            node[parts[-1]] = value
    return out


def _merge(base: dict, layer: dict, origin: dict[str, str], where: str, prefix: str = "") -> dict:
    """Deep-merge ``layer`` onto ``base`` after checking its keys against the schema."""
    _check_keys(layer, _schema_at(prefix), where, prefix)
    out = dict(base)
    for key, value in layer.items():
        if key == "include" and not prefix:
            continue
        dotted = f"{prefix}{key}"
        sub = _schema_at(dotted + ".")
        deep = sub is not None or dotted.split(".")[0] == "cluster"  # cluster: its own schema (diffgrpo.cluster)
        if deep and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, origin, where, dotted + ".")
        else:
            out[key] = value
            origin[dotted] = where
    return out


def _schema_at(prefix: str) -> type | None:
    """The dataclass that describes the mapping at dotted ``prefix`` (``""`` is Config)."""
    cls: type | None = Config
    for part in [p for p in prefix.split(".") if p]:
        fields = {f.name: f for f in dataclasses.fields(cls)} if cls else {}
        if part not in fields:
            return None
        cls = _dataclass_of(_hints(cls)[part])
    return cls


def _check_keys(layer: Any, cls: type | None, where: str, prefix: str) -> None:
    if cls is None:
        return  # a free-form mapping (task_options)
    if not isinstance(layer, dict):
        raise ParamsError(f"{where}: `{prefix.rstrip('.')}` must be a mapping, got {layer!r}")
    known = {f.name for f in dataclasses.fields(cls)} | ({"include"} if not prefix else set())
    for key in layer:
        if f"{prefix}{key}" in MOVED:
            raise ParamsError(f"{where}: `{prefix}{key}` has moved to {MOVED[f'{prefix}{key}']}")
        if key not in known:
            hint = _closest(str(key), known)
            raise ParamsError(
                f"{where}: unknown key `{prefix}{key}`" + (f" (did you mean `{prefix}{hint}`?)" if hint else "")
                + f"; known keys here: {sorted(known)}"
            )


def _require_complete(merged: dict, origin: dict[str, str], cls: type = Config, prefix: str = "") -> None:
    for f in dataclasses.fields(cls):
        dotted = f"{prefix}{f.name}"
        if f.name not in merged:
            raise ParamsError(f"{DEFAULTS_FILE}: key `{dotted}` is not set by defaults.yaml or the study file")
        sub = _dataclass_of(_hints(cls)[f.name])
        if sub is not None and isinstance(merged[f.name], dict):
            _require_complete(merged[f.name], origin, sub, dotted + ".")


def _convert(cls: type, data: Any, prefix: str, origin: dict[str, str]) -> Any:
    # a key inside a list item (`eprli.levels[0].steps`) was given in the file that gave the list
    where = lambda key: origin.get(key) or origin.get(key.split("[")[0], "params")  # noqa: E731
    if not isinstance(data, dict):
        raise ParamsError(f"{where(prefix.rstrip('.'))}: `{prefix.rstrip('.')}` must be a mapping")
    _check_keys(data, cls, where(prefix.rstrip(".")), prefix)
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        dotted = f"{prefix}{f.name}"
        value = data[f.name]
        sub = _dataclass_of(hints[f.name])
        item = _list_of_dataclass(hints[f.name])
        if sub is not None:
            kwargs[f.name] = _convert(sub, value, dotted + ".", origin)
        elif item is not None:
            if not isinstance(value, list):
                raise ParamsError(f"{where(dotted)}: `{dotted}` must be a list, got {value!r}")
            kwargs[f.name] = [_convert(item, _item_mapping(item, v, f"{dotted}[{i}]", where(dotted)),
                                       f"{dotted}[{i}].", origin) for i, v in enumerate(value)]
        else:
            kwargs[f.name] = _check_value(value, hints[f.name], f.metadata, dotted, where(dotted))
    return cls(**kwargs)


def _check_value(value: Any, tp: Any, meta: Any, key: str, where: str) -> Any:
    try:
        value = _coerce(value, tp)
    except TypeError as e:
        raise ParamsError(f"{where}: `{key}` = {value!r}: {e}") from None
    lo, hi = meta.get("lo"), meta.get("hi")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if lo is not None and value < lo or hi is not None and value > hi:
            raise ParamsError(f"{where}: `{key}` = {value!r} is out of range [{lo}, {hi}]")
    return value


def _coerce(value: Any, tp: Any) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a)
            except TypeError as e:
                errors.append(str(e))
        raise TypeError(" or ".join(errors))
    if origin is Literal:
        if value not in args:
            raise TypeError(f"expected one of {list(args)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return [_coerce(v, args[0]) for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping, got {type(value).__name__}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError(f"expected true/false, got {type(value).__name__}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an integer, got {type(value).__name__}")
        return value
    if tp is float:
        # YAML reads 3e-5 as a string (YAML 1.1); accept numeric strings for floats only
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise TypeError(f"expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise TypeError("expected a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {type(value).__name__}")
        return value
    raise TypeError(f"unsupported type {tp}")


def _list_of_dataclass(tp: Any) -> type | None:
    """``X`` when ``tp`` is ``list[X]`` of a dataclass X (arms, evaluation sets)."""
    return get_args(tp)[0] if get_origin(tp) is list and dataclasses.is_dataclass(get_args(tp)[0]) else None


def _item_mapping(cls: type, value: Any, key: str, where: str) -> dict:
    """An entry of a list of mappings; an arm may be a bare policy name (``hard``)."""
    if cls is ArmConfig and isinstance(value, str):
        return {"name": value, "policy": value}
    if not isinstance(value, dict):
        raise ParamsError(f"{where}: `{key}` must be a mapping" + (" or a policy name" if cls is ArmConfig else "")
                          + f", got {value!r}")
    if "name" not in value:
        raise ParamsError(f"{where}: `{key}` has no `name`")
    if cls is ArmConfig and "policy" not in value:
        raise ParamsError(f"{where}: `{key}` ({value['name']}) has no `policy`")
    if cls is LevelParams:  # a level has no defaults.yaml behind it: nothing silently defaulted
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in value]
        if missing:
            raise ParamsError(f"{where}: `{key}` does not set {missing}; every level sets every key "
                              f"({sorted(f.name for f in dataclasses.fields(cls))})")
    return value


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _dataclass_of(tp: Any) -> type | None:
    return tp if dataclasses.is_dataclass(tp) else None


def _closest(key: str, known: set[str]) -> str | None:
    import difflib

    match = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return match[0] if match else None
