"""Run parameters: layered YAML validated into pydantic models.

A run is fully described by YAML files in ``params/``, applied in order:

1. ``params/defaults.yaml``: every parameter's value, with a comment on where it comes from
   (the one place defaults live: the models below declare types and ranges, not values; an
   online method added since the flat ``train.online`` block declares its keys' defaults in its
   own module, :mod:`diffgrpo.online`, as a plugin's method must);
2. the study file(s), e.g. ``params/embedded.yaml`` (``include: [other.yaml]`` layers more
   files underneath it);
3. overrides from the command line or a notebook's ``parameters`` cell, as a nested dict or
   dotted keys (``{"train.max_steps": 20}``).

Every layer is checked against the schema: an unknown or misspelled key, a value of the wrong
type or out of range is a :class:`ParamsError` that names the file and the key (with a
did-you-mean). ``plugins:`` names Python files or modules imported before validation, so the
selection policies and rewards they register can be named by the arms (docs/extending.md).
The effective value of every parameter is written beside each run's outputs (:func:`dump`).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator, model_validator

from diffgrpo import online, policies, rewards
from diffgrpo.params.files import DEFAULTS_FILE, ParamsError, closest, expand, load_plugin, merge, overrides_mapping, params_dir, parse_overrides, read_yaml, read_yaml_value, resolve, unknown_key, with_includes
from diffgrpo.online import Settings as OnlineSettings
from diffgrpo.online.dynamic_sampling import DynamicSamplingParams
from diffgrpo.params.cluster import ClusterConfig
from diffgrpo.params.cluster import check as check_cluster
from diffgrpo.registry import PAPERS

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
#: a seed numpy's and torch's generators take (a larger one fails deep inside a stage)
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
NonNeg = Annotated[float, Field(ge=0.0)]
Frac = Annotated[float, Field(ge=0.0, le=1.0)]


class _Section(BaseModel):
    # strict: no "3" for an int, no 1.0 for a bool; floats must be finite (YAML's 3e-5 is read
    # as a float by the loader below, not as the string YAML 1.1 makes of it)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# ---- schema (values: params/defaults.yaml) ----------------------------------------------------
class ModelConfig(_Section):
    name: str = Field(description="short id used in artifact paths; probes are keyed by it")
    path: str = Field(description="'embedded' (the packaged default), a local folder or a hub id")
    gguf_file: str | None
    dtype: Literal["float32", "bfloat16", "float16"]
    torch_threads: PosInt | None = Field(description="CPU threads for torch (null: torch's default)")
    device: Literal["cpu", "cuda"] = Field(description="where the model runs in every stage")
    chat_template_kwargs: dict[str, Any]


class DatasetConfig(_Section):
    task: str = Field(description="a name from diffgrpo.tasks.names()")
    task_options: dict[str, Any]
    source: str | None = Field(description="hub | offline | path to a local file | null (auto)")
    train_split: str
    test_split: str
    pool_size: PosInt | None
    test_size: PosInt | None


class SamplingConfig(_Section):
    temperature: Annotated[float, Field(ge=0.0, le=10.0)]
    top_p: Frac
    max_new_tokens: PosInt
    batch_size: PosInt


class ProbeConfig(_Section):
    k: PosInt
    sampling: SamplingConfig
    one_sample: bool
    seed: Seed
    test: bool


class SelectConfig(_Section):
    budget_frac: Frac | None
    budget_count: PosInt | None
    seed: Seed
    max_tier: int | None
    tier_bins: list[float]


class LoraParams(_Section):
    r: PosInt
    alpha: PosInt
    dropout: Frac
    target_modules: list[str]


class LengthRewardParams(_Section):
    weight: NonNeg
    cache: PosInt


class TrainConfig(_Section):
    """diffgrpo's own training choices and the values the papers fix; ``trl`` passes any other
    of TRL's ``GRPOConfig`` options through, checked against its fields."""

    seeds: list[Seed]
    max_steps: PosInt | None = Field(description="a run's update steps; null: train.epochs decides them")
    epochs: Annotated[float, Field(gt=0.0)] | None = Field(
        description="passes over the arm's own selection: steps = ceil(epochs x ceil(selected / prompts_per_step) x "
                    "num_iterations); "
                    "null: train.max_steps decides them")
    prompts_per_step: PosInt
    group_size: Annotated[int, Field(ge=2)]
    learning_rate: NonNeg
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"]
    warmup_ratio: Frac
    weight_decay: NonNeg
    max_grad_norm: NonNeg
    beta: NonNeg
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"]
    scale_rewards: Literal["group", "batch", "none"]
    epsilon: NonNeg
    epsilon_high: NonNeg
    num_iterations: PosInt
    mask_truncated_completions: bool
    max_prompt_length: PosInt | None
    max_completion_length: PosInt
    temperature: NonNeg
    top_p: Frac
    save_steps: PosInt
    logging_steps: PosInt
    report_to: Literal["tensorboard", "trackio", "wandb", "mlflow", "none"] = Field(
        description="TRL's trackers (tensorboard: event files in runs/<run>/tensorboard/); not in a run's key")
    lora: LoraParams
    per_device_prompts: PosInt | None
    num_processes: PosInt = Field(description="processes one training run spans (accelerate launch; one GPU each)")
    bf16: bool
    gradient_checkpointing: bool
    merge_lora_for_generation: bool
    use_vllm: bool
    vllm_mode: Literal["colocate", "server"]
    vllm_gpu_memory_utilization: Frac
    vllm_tensor_parallel_size: PosInt
    dynamic_sampling: DynamicSamplingParams
    online: Annotated[OnlineSettings, SerializeAsAny()] = Field(
        description="an online method and its keys (diffgrpo.online: each method's module declares them, and the "
                    "defaults of a method added since the flat block of defaults.yaml)")
    length_reward: LengthRewardParams
    max_completions: PosInt | None
    budgets_as_checkpoints: bool = Field(
        description="arms that differ only in their own max_completions are checkpoints of the largest one's run "
                    "(diffgrpo.params.budgets.checkpoint_of); not in a run's key")
    trl: dict[str, Any] = Field(description="more GRPOConfig options, passed through as they are")

    @model_validator(mode="before")
    @classmethod
    def _dynamic_sampling_is_one_run(cls, data: Any) -> Any:
        """``online.method: dynamic_sampling`` is ``dynamic_sampling.enabled: true`` spelled as a
        method: one run, one key (diffgrpo.online.dynamic_sampling). Folded here, at load, into
        the switch, the one spelling a loaded ``train`` holds (the switch is in the run keys
        since before the registry): every reader checks ``dynamic_sampling.enabled``, never
        ``online.method == "dynamic_sampling"``."""
        if isinstance(data, dict) and isinstance(data.get("online"), dict) and \
                data["online"].get("method") == "dynamic_sampling" and isinstance(data.get("dynamic_sampling"), dict):
            rest = sorted(set(data["online"]) - {"method"})
            if rest:
                return data  # the method's model refuses its unknown keys, named
            return {**data, "online": {"method": online.NONE},
                    "dynamic_sampling": {**data["dynamic_sampling"], "enabled": True}}
        return data


class LevelParams(_Section):
    """One level of paper 002's EPRLI curriculum (docs/paper002.md); every key is required."""

    name: str
    p_hat: list[float] | None
    tiers: list[int] | None
    prompts: PosInt
    steps: PosInt
    max_completion_length: PosInt
    epsilon: NonNeg
    epsilon_high: NonNeg
    group_size: Annotated[int, Field(ge=2)]
    buffer_size: PosInt
    dynamic_sampling: bool
    length_reward_weight: NonNeg


class EprliConfig(_Section):
    levels: list[LevelParams]
    seed: Seed


class GenerationBackendConfig(_Section):
    backend: Literal["hf", "vllm"]
    vllm_gpu_memory_utilization: Frac
    vllm_tensor_parallel_size: PosInt
    vllm_max_model_len: PosInt | None
    vllm_cpu_kv_cache_gib: Annotated[float, Field(gt=0.0)]  # vLLM's CPU build: host RAM for the KV cache


class EvalSetConfig(_Section):
    """An evaluation set besides the training task's held-out ``test`` set; a null field takes
    the study's value (``dataset.*``, ``dataset.test_split``, ``evaluate.*``). ``size: all``
    scores every row of the set's split, whatever ``dataset.test_size`` is (a benchmark of 30
    problems in a study that draws 500 test prompts of its training task)."""

    name: str
    description: str = ""
    task: str | None = None
    task_options: dict[str, Any] | None = None
    source: str | None = None
    split: str | None = None
    size: PosInt | Literal["all"] | None = None
    greedy: bool | None = None
    n_samples: NonNegInt | None = None
    pass_k: list[int] | None = None
    max_new_tokens: PosInt | None = None


class EvaluateConfig(_Section):
    greedy: bool
    n_samples: NonNegInt
    pass_k: list[int]
    sampling: SamplingConfig
    checkpoints: Literal["all", "final"]
    seed: Seed
    sets: list[EvalSetConfig]


class SequentialConfig(_Section):
    """Seeds in blocks (:mod:`diffgrpo.stats.sequential`): a look at the declared question after
    every ``block`` seeds up to ``max_seeds``; ``margin``: the equivalence margin in points."""

    block: PosInt | None
    max_seeds: PosInt | None
    margin: Annotated[float, Field(gt=0)] | None


class AnalyzeConfig(_Section):
    metric: Literal["greedy_acc", "pass@1"]
    reports: list[str]
    compare: list[str]
    bootstrap: Annotated[int, Field(ge=100)]
    seed: Seed
    test_bins: list[Frac]
    match_margin: Annotated[float, Field(gt=0)]
    primary: list[str]
    across_budgets: bool
    confirmation: str | None = Field(
        default=None, description="the params file of the study that asks this one's question on fresh seeds "
                                  "(a question declared after its runs were seen); the verdict names it")
    sequential: SequentialConfig


def budget_size(pool: int, frac: float | None, count: int | None) -> int:
    """A budget's prompt count: ``count``, or ``floor(frac x pool)`` (the one formula; the select
    stage checks that it fits, :func:`diffgrpo.select.budget`)."""
    if count is None and frac is None:
        raise ParamsError("select.budget_frac and select.budget_count are both null; set one")
    return count if count is not None else math.floor(frac * pool)


class ArmConfig(_Section):
    """One arm: a selection policy (``select``, :mod:`diffgrpo.policies`) x a training treatment
    (``reward``, :mod:`diffgrpo.rewards`; ``curriculum: levels``: paper 002's EPRLI levels in
    order; ``train``: its own train.* settings). A null budget or max_tier is the study's.
    ``role: control``: a control arm (003's ``random_reward``), whose reward carries no signal
    about the answers, so its gains are the optimiser's; reports draw it apart. Any other reward
    without it (partial credit, a length penalty) is an ordinary arm's. ``charge_probe``: whether
    the run's compute ledger charges it the probe's completions (null: when its policy reads the
    probe or its training warm-starts from it, diffgrpo.train.ledger); true charges a policy that
    does not (offline random "with the probe charged"). Not in a run's key."""

    name: str
    select: str
    role: Literal["arm", "control"] = "arm"
    reward: str | dict[str, float] = rewards.VERIFIER
    curriculum: Literal["none", "levels"] = "none"
    budget_frac: Frac | None = None
    budget_count: PosInt | None = None
    max_tier: int | None = None
    options: dict[str, Any] = {}
    train: dict[str, Any] = {}
    charge_probe: bool | None = None

    @property
    def reward_weights(self) -> dict[str, float]:
        return {self.reward: 1.0} if isinstance(self.reward, str) else dict(self.reward)

    def selected_count(self, study: SelectConfig, pool: int) -> int | None:
        """The prompts the arm's budget selects from a pool of ``pool`` (:func:`budget_size`);
        None for a policy defined by a set (its size is known after 02_select)."""
        if not policies.get(self.select).budgeted:
            return None
        return budget_size(pool, *self.budget(study))

    def budget(self, study: SelectConfig) -> tuple[float | None, int | None]:
        """(budget_frac, budget_count): the arm's own when it sets either, else the study's."""
        if self.budget_frac is not None or self.budget_count is not None:
            return self.budget_frac, self.budget_count
        return study.budget_frac, study.budget_count

    @property
    def is_control(self) -> bool:
        """A control arm (``role: control``): drawn apart in reports, left out of their fits."""
        return self.role == "control"


#: arms a bare name stands for; any other bare name is ``{name: <n>, select: <n>}``. This and
#: :data:`TREATMENTS` are named *settings* (plain data a params file could spell out), not code a
#: plugin registers, so they are dicts rather than :class:`diffgrpo.registry.Registry` entries
NAMED_ARMS: dict[str, dict[str, Any]] = {
    "random_reward": {"select": "random", "reward": "bernoulli_control", "role": "control"},  # 003's control arm
    "eprli": {"select": "levels", "curriculum": "levels"},  # 002: the levels in order
    "eprli_grpo": {"select": "levels"},  # 002: the same prompts, one level with train.*
    "eprli_dynamic": {"select": "levels", "train": {"dynamic_sampling": {"enabled": True}}},
}

#: training treatments any arm can take: a bare name ``<arm>_<treatment>`` is the arm (a named
#: arm or a policy) with the treatment's train.* settings on top of its own, e.g. ``hard_dr_grpo``
TREATMENTS: dict[str, dict[str, Any]] = {
    # Dr. GRPO (Liu et al. 2025, arXiv:2503.20783; 003 appendix A.5 names it as a robustness
    # check): no std scaling of the advantage (r - mean(r)) and the token losses summed and
    # divided by a constant, not by each completion's length (TRL 1.16: loss_type dr_grpo divides
    # by rows x max_completion_length; scale_rewards none skips the division by the group's std)
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
    # online selection inside training (diffgrpo.train.online, docs/online_selection.md): a group is
    # kept only if its mean reward lies in train.online.band, refilled as dynamic sampling refills
    # (Bae et al. 2025, arXiv:2504.03380, balanced online difficulty filtering)
    "online_band": {"online": {"method": "band"}},
    # each step's prompts drawn by Thompson sampling from a Beta posterior of each prompt's success
    # rate, toward train.online.target (MoPPS: Qu et al. 2025, arXiv:2507.04632)
    "posterior": {"online": {"method": "posterior"}},
    "posterior_warm": {"online": {"method": "posterior", "warm_start": True}},  # the same, from the probe's samples
    # prompts whose recent groups had equal rewards skipped before generation, each re-checked with
    # probability train.online.recheck (GRESO: Zheng et al. 2025, arXiv:2506.02177)
    "skip_zero_variance": {"online": {"method": "skip_zero_variance"}},
    # each step's prompts drawn in proportion to p(1 - p) of their online success estimate (LILO:
    # Foster and Foerster 2025, arXiv:2502.12272)
    "learnability": {"online": {"method": "learnability"}},
    # a pilot of a few completions per candidate prompt, then the step's groups committed to the
    # prompts the pilot found informative, the pilot charged (Pilot-Commit, arXiv:2605.26606)
    "pilot_commit": {"online": {"method": "pilot_commit"}},
}


def bare_arm(name: str) -> dict[str, Any]:
    """What a bare arm name stands for: a named arm (:data:`NAMED_ARMS`), an arm with a
    treatment (``<arm>_<treatment>``, :data:`TREATMENTS`; a registered policy of that full name
    comes first), else the policy of that name, ``{name: <n>, select: <n>}``."""
    if name in NAMED_ARMS:
        return {"name": name, **NAMED_ARMS[name]}
    for treatment, settings in TREATMENTS.items():
        base = name.removesuffix(f"_{treatment}")
        if base and base != name and name not in policies.names():
            arm = bare_arm(base)
            return {**arm, "name": name, "train": {**arm.get("train", {}), **settings}}
    return {"name": name, "select": name}


class Config(_Section):
    study: str
    description: str
    seed: Seed
    workers: PosInt = Field(description="training / evaluation runs at once, each in its own process; on a CPU, the processes the probe's chunks are generated in")
    gpu: str = Field(description="the GPU a cuda study is planned for (diffgrpo.study.plan.GPUS); --plan checks it fits")
    plugins: list[str] = Field(description="Python files or modules registering policies and rewards")
    model: ModelConfig
    dataset: DatasetConfig
    probe: ProbeConfig
    arms: list[ArmConfig]
    select: SelectConfig
    generation: GenerationBackendConfig
    train: TrainConfig
    eprli: EprliConfig
    evaluate: EvaluateConfig
    analyze: AnalyzeConfig
    cluster: ClusterConfig = Field(description="each notebook job's resources on Slurm (diffgrpo.params.cluster)")

    @field_validator("arms", mode="before")
    @classmethod
    def _bare_arm_names(cls, value):
        if not isinstance(value, list):
            return value
        return [bare_arm(v) if isinstance(v, str) else v for v in value]

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def replace(self, **overrides: Any) -> Config:
        """A copy with dotted-key overrides applied and validated."""
        return build(merge(self.to_dict(), expand(overrides, "overrides"), {}, "overrides", Config))

    def arm(self, name: str) -> ArmConfig:
        for a in self.arms:
            if a.name == name:
                return a
        raise ParamsError(f"no arm {name!r} in study {self.study!r}; its arms: {[a.name for a in self.arms]}")

    def for_arm(self, name: str) -> Config:
        """The settings one arm's runs train with: ``train`` with the arm's own settings on top
        (``self`` when it has none, so its run keys are the study's; else a copy whose only arm
        is this one)."""
        arm = self.arm(name)
        if not arm.train:
            return self
        # the declared question names other arms: it is the study's, not this arm's runs'
        return self.replace(train=dict(arm.train), arms=[{**arm.model_dump(), "train": {}}], **{
            "analyze.primary": [], "analyze.confirmation": None,
            "analyze.sequential": {"block": None, "max_seeds": None, "margin": None}})

    def run_steps(self, arm: str | None, n_selected: int | None) -> int:
        """The update steps of one run of ``arm`` (None: of this config's own ``train``, one
        :meth:`for_arm` gave) whose selection holds ``n_selected`` prompts: the arm's
        ``train.max_steps``, or its ``train.epochs`` passes over its own selection,
        ``ceil(epochs x ceil(n_selected / prompts_per_step) x num_iterations)`` (one generated
        batch of ``prompts_per_step`` prompts feeds ``num_iterations`` updates), so an arm with a
        smaller set trains fewer steps an epoch. TRL's sampler drops a pass's last partial batch
        and reshuffles for the next, so with ``n_selected`` not a multiple of ``prompts_per_step``
        the pass's last update takes the next pass's first batch. The one place a run's length
        is decided: training, the finished check and the plan ask here."""
        t = (self if arm is None else self.for_arm(arm)).train
        if t.max_steps is not None:
            return t.max_steps
        if t.epochs is None:  # refused at load (_check_consistent); a hand-built config may still have it
            raise ParamsError("train.max_steps and train.epochs are both null; set one")
        if n_selected is None or n_selected < 1:
            raise ParamsError(f"train.epochs = {t.epochs:g} counts passes over a run's selection, whose size is "
                              f"{'not known here' if n_selected is None else n_selected}; run the select stage "
                              "(02_select) first, or set train.max_steps")
        per_epoch = math.ceil(n_selected / t.prompts_per_step) * t.num_iterations
        return max(1, math.ceil(t.epochs * per_epoch - 1e-9))

    def eval_set_names(self) -> list[str]:
        """``test`` (the training task's held-out set), then ``evaluate.sets`` in order."""
        return [TEST_SET] + [s.name for s in self.evaluate.sets]

    def for_eval_set(self, name: str) -> Config:
        """The settings that score evaluation set ``name``: its dataset and evaluation keys in
        place of the study's (``self`` for ``test``)."""
        if name == TEST_SET:
            return self
        found = [s for s in self.evaluate.sets if s.name == name]
        if not found:
            raise ParamsError(f"no evaluation set {name!r} in study {self.study!r}; its sets: {self.eval_set_names()}")
        s = found[0]
        other_task = s.task not in (None, self.dataset.task)
        options = {} if s.task_options is None and other_task else s.task_options  # not the training task's
        changes: dict[str, Any] = {k: v for k, v in {
            "dataset.task": s.task, "dataset.task_options": options, "dataset.source": s.source,
            "dataset.test_split": s.split, "dataset.test_size": s.size, "evaluate.greedy": s.greedy,
            "evaluate.n_samples": s.n_samples, "evaluate.pass_k": s.pass_k,
            "evaluate.sampling.max_new_tokens": s.max_new_tokens}.items() if v is not None}
        if other_task and s.source is None:
            changes["dataset.source"] = None  # nor the training data's file or hub choice
        if other_task:  # another task's rows share none with the pool: none are held back for one
            changes["dataset.train_split"] = NO_POOL
        elif s.source not in (None, "hub", "offline"):
            # a local file of one split: its rows are the set's split alone (the study's
            # train_split would read the same rows again and find them all shared)
            changes["dataset.train_split"] = s.split or self.dataset.test_split
        if s.size == "all":
            changes["dataset.test_size"] = None  # the whole split
        changes["evaluate.sets"] = []
        if "dataset.task_options" in changes:  # a set's options are stated whole, not layered on the study's
            return self.replace(**{"dataset.task_options": {}, "evaluate.sets": []}).replace(**changes)
        return self.replace(**changes)


#: an evaluation set's train split where its task is not the training task's: no pool is drawn from
#: it, so none of its rows are held back for one (diffgrpo.tasks.splits)
NO_POOL = "no-pool"  # a path part too (layout): a name, not a sentence

#: the name of the held-out test set of the training task among the evaluation sets
TEST_SET = "test"


# ---- loading ---------------------------------------------------------------------------------
def load(*files: str | Path, overrides: dict[str, Any] | None = None, defaults: bool = True) -> Config:
    """Layer ``defaults.yaml``, then ``files`` in order, then ``overrides``; validate."""
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}  # dotted key -> file that set it
    layers = [resolve(DEFAULTS_FILE)] if defaults else []
    for f in files:
        layers.extend(with_includes(resolve(f), seen=set()))
    for path in layers:
        merged = merge(merged, read_yaml(path), origin, str(path), Config)
    overrides = overrides_mapping(overrides)
    if overrides:
        merged = merge(merged, expand(overrides, "overrides"), origin, "overrides", Config)
    cfg = build(merged, origin)
    if defaults and cfg.analyze.confirmation is not None:  # a study's file (a report's params are read
        try:                                             # elsewhere too, where that file need not be)
            resolve(cfg.analyze.confirmation)
        except ParamsError as err:
            raise ParamsError(f"{origin.get('analyze.confirmation', 'params')}: `analyze.confirmation` names "
                              f"{cfg.analyze.confirmation!r}, which is not a params file: {err}") from None
    return cfg


def build(data: dict[str, Any], origin: dict[str, str] | None = None) -> Config:
    origin = origin or {}

    def where(key: str) -> str:  # the file that set a key, or the list or section holding it
        while key and key not in origin:
            key = key.split("[")[0] if "[" in key else key.rpartition(".")[0]
        return origin.get(key, "params")

    secrets = _secrets(data)
    if secrets:
        raise ParamsError(f"{where(secrets[0])}: `{secrets[0]}` is refused: {NOT_FROM_PARAMS}")
    if isinstance(data.get("cluster"), dict):
        check_cluster(data["cluster"], where)  # its own messages: sbatch options, stages, time limits
    if isinstance(data.get("plugins"), list):
        data = {**data, "plugins": [load_plugin(p, origin.get("plugins", "params")) for p in data["plugins"]]}
    try:
        cfg = Config.model_validate(data)
    except ValidationError as err:
        raise ParamsError(_explain(err, data, where)) from None
    _check_trl_options(cfg.train.trl, where, "train.trl")  # first: the checks below build copies of cfg
    _check_consistent(cfg, where)
    return cfg


def _explain(err: ValidationError, data: dict, where) -> str:
    """pydantic's errors as one line naming the file, the key and what to do: an unknown key
    first (a typo also leaves its key missing), then a missing key, then the first other."""
    errors = err.errors()
    e = next((e for e in errors if e["type"] == "extra_forbidden"), None)
    if e is not None:
        key, parent = _dotted(e["loc"]), _dotted(e["loc"][:-1])
        return unknown_key(where(key), f"{parent}." if parent else "", str(e["loc"][-1]),
                           _model_at(e["loc"][:-1], data).model_fields)
    missing = [e for e in errors if e["type"] == "missing"]
    if missing:
        parent = _dotted(missing[0]["loc"][:-1])
        keys = [str(m["loc"][-1]) for m in missing if _dotted(m["loc"][:-1]) == parent]
        if "[" not in parent:
            first = f"{parent}.{keys[0]}" if parent else keys[0]
            return f"{DEFAULTS_FILE}: key `{first}` is not set by defaults.yaml or the study file"
        return f"{where(parent)}: `{parent}` does not set {keys}"
    e = errors[0]
    key = _dotted(e["loc"])
    value = e.get("input")
    shown = "nan" if isinstance(value, float) and math.isnan(value) else repr(value)
    if e["type"] in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"{where(key)}: `{key}` = {shown} is out of range ({e['msg']})"
    if e["type"] == "finite_number":
        return f"{where(key)}: `{key}` = {shown}: expected a finite number"
    return f"{where(key)}: `{key}` = {shown}: {e['msg']}"


def _dotted(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "int", "float", "bool") or "[" in part:
            continue  # a union's branch (reward: str | dict[str, float]), not a key
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(loc, data: Any = None) -> type[BaseModel]:
    """The model of the mapping at ``loc``; ``train.online``: its method's settings (``data``'s)."""
    cls: Any = Config
    for part in loc:
        data = data[part] if isinstance(data, (dict, list)) and (isinstance(part, int) or part in data) else None
        if isinstance(part, int):
            continue
        ann = cls.model_fields[part].annotation
        inner = getattr(ann, "__args__", (ann,))
        cls = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), ann)
        if cls is online.Settings and isinstance(data, dict) and data.get("method", online.NONE) in online.names() + [online.NONE]:
            cls = online.settings_class(data.get("method", online.NONE))
    return cls


def get(cfg: Config, dotted: str) -> Any:
    """The value at a dotted key, e.g. ``get(cfg, "train.max_steps")``."""
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def dump(cfg: Config) -> str:
    """The effective parameters as YAML (written beside each run's outputs)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


#: GRPOConfig options diffgrpo derives from its own keys (besides those of the same name in
#: ``train``); every other option may be passed through ``train.trl``, its fixed choices too
DERIVED_GRPO_OPTIONS = {
    "num_generations": "train.group_size", "max_steps": "train.max_steps or train.epochs (or the level's steps)",
    "num_train_epochs": "train.epochs (as steps: Config.run_steps)",
    "per_device_train_batch_size": "train.prompts_per_step and train.per_device_prompts",
    "gradient_accumulation_steps": "train.prompts_per_step and train.per_device_prompts",
    "steps_per_generation": "train.prompts_per_step and train.per_device_prompts",
    "lr_scheduler_type": "train.lr_scheduler", "warmup_steps": "train.warmup_ratio", "seed": "train.seeds",
    "output_dir": "the run's folder (diffgrpo.store.layout)", "use_cpu": "model.device",
    "chat_template_kwargs": "model.chat_template_kwargs", "activation_checkpointing": "train.gradient_checkpointing",
}


#: why a params file may not publish a run or carry a credential, and what to do instead
NOT_FROM_PARAMS = ("a params file may not publish a run or carry a credential: the params are copied into every "
                   "run's params.yaml, manifest and executed notebook, and a study must not contact a service its "
                   "owner did not name. To share a run, upload its folder yourself (e.g. `hf upload <repo> "
                   "outputs/<study>/runs/<run>`); keep tokens in the environment (HF_TOKEN) or a login "
                   "(`hf auth login`), never in params")


def publishes(name: str) -> bool:
    """A TRL option that publishes a run (``push_to_hub``, ``hub_*``, ``log_completions_hub_repo``, a trackio Space) or
    authenticates to a service (``*_token``): refused in ``train.trl`` (:data:`NOT_FROM_PARAMS`)."""
    return "hub" in name.split("_") or name == "trackio_space_id" or is_secret(name)


def is_secret(name: str) -> bool:
    """A key that holds a credential, in any mapping of a params file."""
    name = str(name).lower()
    return (name in ("token", "password", "secret", "api_key", "apikey") or name.endswith(("_token", "_api_key",
            "_password", "_secret")))


def _secrets(node: Any, prefix: str = "") -> list[str]:
    """The dotted keys of ``node`` (a params mapping, its lists) that hold a credential."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            dotted = f"{prefix}.{k}" if prefix else str(k)
            out += [dotted] if is_secret(k) else _secrets(v, dotted)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _secrets(v, f"{prefix}[{i}]")
    return out


def _finite(value: Any) -> bool:
    """No inf or NaN anywhere in ``value`` (a number, or lists and mappings of them)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


@functools.cache
def _grpo_option_adapter(name: str):
    """A pydantic adapter for GRPOConfig's field ``name`` (its type hints resolved once a process:
    resolving them per params load cost 2 ms a call, most of a 130-run --plan)."""
    import typing

    from pydantic import TypeAdapter
    from trl import GRPOConfig

    return TypeAdapter(typing.get_type_hints(GRPOConfig)[name])


def _check_trl_options(options: dict[str, Any], where, key: str) -> None:
    """``train.trl``: each a GRPOConfig field of the installed TRL, of its type, finite, not one
    diffgrpo sets from its own keys, and none that publishes a run or carries a credential
    (imports TRL only when there are options). ``where(dotted key)``: the file that set it."""
    if not options:
        return
    for name, value in options.items():
        if publishes(name):
            raise ParamsError(f"{where(f'{key}.{name}')}: `{key}.{name}` is refused: {NOT_FROM_PARAMS}")
        if not _finite(value):
            raise ParamsError(f"{where(f'{key}.{name}')}: `{key}.{name}` = {value!r}: expected a finite number "
                              "(inf and NaN train nothing and would still be recorded complete)")
    import dataclasses

    from trl import GRPOConfig

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    for name, value in options.items():
        here = where(f"{key}.{name}")
        owner = f"train.{name}" if name in TrainConfig.model_fields else DERIVED_GRPO_OPTIONS.get(name)
        if owner:
            raise ParamsError(f"{here}: `{key}.{name}` is set by diffgrpo from {owner}; set that instead")
        if name not in fields:
            hint = closest(name, set(fields))
            raise ParamsError(f"{here}: `{key}.{name}` is not an option of TRL's GRPOConfig"
                              + (f" (did you mean `{hint}`?)" if hint else ""))
        try:
            _grpo_option_adapter(name).validate_python(value, strict=False)
        except ValidationError as err:
            raise ParamsError(f"{here}: `{key}.{name}` = {value!r}: {err.errors()[0]['msg']}") from None
        except Exception:  # a type pydantic cannot check: GRPOConfig's own checks run when a run starts
            pass


# ---- checks across keys ------------------------------------------------------------------------
#: a name that is safe as a folder and file name, and cannot be read as another run's id
_NAME = re.compile(r"[A-Za-z0-9_.]+")
#: the one rule for every value that becomes a part of a path under the outputs root
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: the keys whose values become path parts (arms, sets and levels are checked with their lists)
PATH_KEYS = ("study", "model.name", "dataset.task", "dataset.train_split")


def check_safe_name(value: Any, key: str) -> str | None:
    """Why ``value`` cannot be a path part (None when it can): :data:`SAFE_NAME`."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
        shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
        return (f"= {shown!r} cannot name a folder: `{key}` becomes a path part under the outputs root, so it "
                "must be a letter or digit followed by letters, digits, `.`, `_` or `-`, at most 100 "
                "characters (no `/`, no leading `.`, not empty)")
    return None


def _check_consistent(cfg: Config, where) -> None:
    """Checks across keys, so a study fails here rather than inside a notebook stage."""

    def fail(key: str, message: str) -> None:
        raise ParamsError(f"{where(key)}: `{key}` {message}")

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
    _check_budget_in_steps_or_epochs(cfg.train, fail)
    _check_online(cfg.train, fail)
    bad = [k for k in cfg.evaluate.pass_k if not 1 <= k <= cfg.evaluate.n_samples]
    if bad:
        fail("evaluate.pass_k", f"has k = {bad}; pass@k needs 1 <= k <= evaluate.n_samples = {cfg.evaluate.n_samples}")
    _check_arms(cfg, fail)
    _check_eval_sets(cfg, fail)
    _check_levels(cfg, fail)
    _check_rows(cfg, fail)
    if any(r not in PAPERS.names() for r in cfg.analyze.reports) or len(set(cfg.analyze.reports)) != len(cfg.analyze.reports):
        fail("analyze.reports", f"= {cfg.analyze.reports}: each of {PAPERS.names()} at most once")
    bins = cfg.analyze.test_bins
    if len(bins) < 2 or bins[0] != 0.0 or bins[-1] != 1.0 or any(a >= b for a, b in zip(bins, bins[1:])):
        fail("analyze.test_bins", f"= {bins}: p_hat edges from 0.0 to 1.0, increasing (e.g. [0.0, 0.3, 0.7, 1.0])")
    if len(set(cfg.analyze.compare)) != len(cfg.analyze.compare):
        fail("analyze.compare", f"= {cfg.analyze.compare} names a study more than once")
    for entry in cfg.analyze.compare:
        try:
            resolve(entry)
        except ParamsError as err:
            fail("analyze.compare", f"names {entry!r}, which is not a params file: {err}")
    _check_primary(cfg, fail)
    if cfg.analyze.confirmation is not None:
        if not cfg.analyze.primary:
            fail("analyze.confirmation", "names the study that confirms this one's declared question, and "
                                         "analyze.primary is empty: declare it, or drop analyze.confirmation")
        if Path(cfg.analyze.confirmation).stem == cfg.study:
            fail("analyze.confirmation", f"names {cfg.analyze.confirmation!r}, this study itself")


def primary_pairs(cfg: Config) -> list[tuple[str, str]]:
    """``analyze.primary`` as (a, b) pairs, in the order and orientation the params file declares
    (each entry ``"a - b"``; checked by :func:`_check_consistent`)."""
    return [tuple(part.strip() for part in entry.split(" - ")) for entry in cfg.analyze.primary]


def _check_primary(cfg: Config, fail) -> None:
    from diffgrpo.params.budgets import budget_level

    seq = cfg.analyze.sequential
    if (seq.block is None) != (seq.max_seeds is None):
        fail("analyze.sequential", "sets one of block and max_seeds: seeds in blocks need both (or neither)")
    if seq.block is not None:
        if seq.block > seq.max_seeds:
            fail("analyze.sequential", f"block = {seq.block} is above max_seeds = {seq.max_seeds}")
        if not cfg.analyze.primary:
            fail("analyze.sequential", "looks at the declared question, and analyze.primary is empty: declare it")
        if len(cfg.train.seeds) > seq.max_seeds:
            fail("analyze.sequential", f"max_seeds = {seq.max_seeds}, and train.seeds lists {len(cfg.train.seeds)}")
    elif seq.margin is not None:
        fail("analyze.sequential", "margin is the rule's, and block / max_seeds are null: set them, or drop margin")

    names, seen = [a.name for a in cfg.arms], set()
    for entry in cfg.analyze.primary:
        parts = entry.split(" - ")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            fail("analyze.primary", f"entry {entry!r}: a contrast is two arms' names apart by ' - ' (spaces around the "
                                    "minus), e.g. 'hard - random'")
        a, b = (p.strip() for p in parts)
        unknown = [x for x in (a, b) if x not in names]
        if unknown:
            fail("analyze.primary", f"entry {entry!r}: {unknown[0]!r} is not an arm of this study; its arms: {names}")
        if a == b:
            fail("analyze.primary", f"entry {entry!r} contrasts an arm with itself")
        if frozenset((a, b)) in seen:
            fail("analyze.primary", f"entry {entry!r}: the pair is declared more than once (in either order)")
        seen.add(frozenset((a, b)))
        budgets = budget_level(cfg, a), budget_level(cfg, b)
        if budgets[0] != budgets[1] and not cfg.analyze.across_budgets:
            fail("analyze.primary", f"entry {entry!r}: the two arms are placed at different total-rollout budgets "
                                    "(their own train.max_completions, the probe charged) "
                                    f"({budgets[0]} and {budgets[1]}); a contrast across budgets is formed only with "
                                    "`analyze.across_budgets: true`")


def _check_arms(cfg: Config, fail) -> None:
    if not cfg.arms:
        fail("arms", "is empty; a study trains at least one arm, e.g. `arms: [hard, easy, middle, random]`")
    middle = [a.name for a in cfg.arms if a.select == "middle"]
    if cfg.probe.k < 2 and middle:
        fail("probe.k", f"= {cfg.probe.k}: one sample makes every p_hat 0 or 1, so arm(s) {middle} (select: middle) "
                        "would pick among ties what hard picks; set probe.k to 2 or more (the papers use 8 to 16)")
    names = [a.name for a in cfg.arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        fail("arms", f"names {dup} more than once; each arm's runs must have their own folders")
    for i, a in enumerate(cfg.arms):
        where = f"arms[{i}] ({a.name or 'no name'})"
        if not _NAME.fullmatch(a.name) or not SAFE_NAME.fullmatch(a.name) or a.name == "base":
            fail("arms", f"{where}: name {a.name!r} must be a letter or digit, then letters, digits, `_` or `.`, "
                         "at most 100 characters, and not `base` (it names the arm's folders; `-` separates the seed)")
        if a.select not in policies.names():
            fail("arms", f"{where}: unknown selection policy {a.select!r}; registered: {policies.names()}; named arms: "
                         f"{list(NAMED_ARMS)}; treatments (`<arm>_<treatment>`): {list(TREATMENTS)}. Your own policy goes in a "
                         "plugin file listed in `plugins:` "
                         "(docs/extending.md)")
        policy = policies.get(a.select)
        unknown = [r for r in a.reward_weights if r not in rewards.names()]
        if unknown:
            fail("arms", f"{where}: unknown reward {unknown[0]!r}; registered: {rewards.names()}. Your own reward goes "
                         "in a plugin file listed in `plugins:` (docs/extending.md)")
        if (a.budget_frac is not None or a.budget_count is not None) and not policy.budgeted:
            fail("arms", f"{where}: policy {a.select!r} is defined by a set, not a size; drop budget_frac/budget_count")
        if a.max_tier is not None and not policy.accepts("max_tier"):
            fail("arms", f"{where}: max_tier applies to a policy that reads it (tiers), not {a.select!r}")
        bad = [o for o in a.options if not policy.accepts(o)]
        if bad:
            fail("arms", f"{where}: policy {a.select!r} takes no option {bad[0]!r}")
        _check_role(a, where, fail)
        if a.curriculum == "levels" and a.select != "levels":
            fail("arms", f"{where}: curriculum `levels` trains on the levels' prompts; set `select: levels`")
        if "seeds" in a.train:
            fail("arms", f"{where}: train.seeds is the study's (train.seeds), not an arm's")
        try:
            arm_cfg = cfg.for_arm(a.name)
        except ParamsError as err:
            fail("arms", f"{where}: its train settings do not validate: {err}")
        if policy.budgeted and cfg.dataset.pool_size is not None:
            _check_budget(cfg, a, arm_cfg.train.prompts_per_step, where, fail)
        _check_arm_does_what_it_says(a, arm_cfg.train, where, fail)


def _check_arm_does_what_it_says(a: ArmConfig, t: TrainConfig, where: str, fail) -> None:
    """Checks of an arm with its own train settings ``t``, before any work (issue 37): a band no
    group can enter, a completion budget under one step, a name that says another arm."""
    step = t.prompts_per_step * t.group_size
    if t.max_completions is not None and t.max_completions < step:
        fail("train.max_completions", f"{where}: = {t.max_completions} is under one step (train.prompts_per_step x "
                                      f"train.group_size = {step} completions), and a run trains whole steps: it would "
                                      f"spend {step}; set it to {step} or more, or null")
    binary = set(a.reward_weights) <= {rewards.VERIFIER, "bernoulli_control"} and len(a.reward_weights) == 1
    if t.online.method == "band" and binary and t.length_reward.weight == 0:
        lo, hi, g = *t.online.band, t.group_size
        if not any(lo - 1e-9 <= k / g <= hi + 1e-9 for k in range(1, g)):
            fail("train.online.band", f"{where}: = {list(t.online.band)} holds no mean a learnable group of "
                                      f"train.group_size = {g} can have (k/{g} for k = 1..{g - 1}, rewards 0 or 1): "
                                      "every group would be dropped and the run make no update; widen the band")
    base = a.name.split(".")[0]  # the report groups arms by the text before the dot
    said = _what_the_name_says(base)
    if said is None:
        return
    # a variant of the named policy (base_wrong: base_wrong_matched) or one defined by its own options
    # (003's released code: hard = p_hat_band [0, 0.3]) is the params author's definition of that arm
    variant = a.select.startswith(said["select"]) or bool(a.options)
    differ = [k for k in ("select", "reward", "role", "curriculum")
              if k in said and getattr(a, k) != said[k] and not (k == "select" and variant)]
    differ += [f"train.{k}" for k, v in _flatten(said.get("train", {})).items() if _flatten(t.model_dump()).get(k) != v]
    if differ:
        fail("arms", f"{where}: its name says {said} but its {', '.join(differ)} say otherwise; reports would draw it "
                     "as that arm: rename it (e.g. `" + a.name.split(".")[0] + "_mine`)")


def _what_the_name_says(name: str) -> dict[str, Any] | None:
    """The settings a policy, named arm or ``<arm>_<treatment>`` name stands for (:func:`bare_arm`),
    or None for a name of the user's own."""
    said = bare_arm(name)
    return said if said.get("select") in policies.names() else None


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def _check_role(a: ArmConfig, where: str, fail) -> None:
    """A control arm trains on a reward other than the verifier's; an arm trained on control
    rewards alone (:func:`diffgrpo.rewards.register` ``control=True``) says it is one, so that a
    report never fits a control's gains as an arm's."""
    if a.role == "control" and a.reward_weights == {rewards.VERIFIER: 1.0}:
        fail("arms", f"{where}: role `control` with the verifier's reward; a control arm trains on a control reward "
                     "(e.g. `reward: bernoulli_control`), else drop `role: control`")
    controls = [r for r in a.reward_weights if rewards.get(r).control]
    if a.role != "control" and controls and len(controls) == len(a.reward_weights):
        fail("arms", f"{where}: trains on the control reward {controls[0]!r} alone; set `role: control` (reports draw "
                     "a control arm apart and leave it out of their fits)")


def _check_budget_in_steps_or_epochs(t: TrainConfig, fail) -> None:
    """Exactly one of train.max_steps and train.epochs decides a run's steps."""
    if t.max_steps is not None and t.epochs is not None:
        fail("train.epochs", f"= {t.epochs:g} and train.max_steps = {t.max_steps} are both set; exactly one decides a "
                             "run's steps: set `max_steps: null` to train in epochs, or `epochs: null` to train in steps")
    if t.max_steps is None and t.epochs is None:
        fail("train.max_steps", "and train.epochs are both null; set one (a number of update steps, or of passes "
                                "over each arm's selection)")


def _check_online(t: TrainConfig, fail) -> None:
    """train.online: each key the method's settings find unworkable (a band [low, high], a Beta
    prior, a pilot smaller than a group), and one process for a method that chooses a step's
    prompts (every process would need every process's history)."""
    for key, why in t.online.problems(t):
        fail(f"train.online.{key}", why)
    if t.online.method != online.NONE and online.get(t.online.method).when == "before" and t.num_processes > 1:
        fail("train.online.method", f"= {t.online.method!r} chooses each step's prompts from the run's history, which "
                                    f"one process holds; set train.num_processes: 1 (here {t.num_processes})")


def _check_budget(cfg: Config, a: ArmConfig, per_step: int, where: str, fail) -> None:
    """A budget that selects no prompt or more than the pool, named with the key that sets it."""
    own = a.budget_frac is not None or a.budget_count is not None
    frac, count = a.budget(cfg.select)
    key = "arms" if own else ("select.budget_count" if count is not None else "select.budget_frac")
    what = f"{where}: " if own else f"(arm {a.name}) "
    pool = cfg.dataset.pool_size
    n = budget_size(pool, frac, count)
    setting = f"budget_count = {count}" if count is not None else f"budget_frac = {frac} of dataset.pool_size = {pool}"
    if n < 1:
        fail(key, f"{what}{setting} selects {n} prompts; raise it to at least {math.ceil(max(per_step, 1) / pool * 1e4) / 1e4} "
                  f"(train.prompts_per_step = {per_step} prompts)" if count is None else f"{what}{setting} selects no prompt")
    if n > pool:
        fail(key, f"{what}{setting} selects {n} prompts, more than the pool of dataset.pool_size = {pool}")
    if a.select == "middle" and n == pool:
        fail(key, f"{what}{setting} selects the whole pool for `middle`, which takes the prompts nearest the median "
                  "p_hat inside the interquartile range (about half the pool): the whole pool has no middle. Lower "
                  "the budget below half the pool, or select `all` or `random`")


def _check_rows(cfg: Config, fail) -> None:
    """A pool larger than the task's training split, where the task declares the split's size
    (``Task.split_rows``: the hub's and the offline copy's rows; a local file is counted when it
    is read). One split feeding both the pool and the held-out set must hold both."""
    from diffgrpo import tasks

    d = cfg.dataset
    if d.source not in (None, "hub", "offline") or d.task not in tasks.TASKS or d.pool_size is None:
        return
    rows = tasks.TASKS.get(d.task).split_rows.get(d.train_split)
    same = d.train_split == d.test_split
    wanted = d.pool_size + ((d.test_size or 0) if same else 0)
    if rows is not None and wanted > rows:
        fail("dataset.pool_size", f"= {d.pool_size}: task {d.task!r}'s split {d.train_split!r} has {rows} rows, fewer "
                                  f"than the {wanted} wanted" + (" with dataset.test_size (the pool and the held-out "
                                  "set are cut from the same split)" if same else "")
             + "; lower it, or set it to null for the whole split")


def _check_eval_sets(cfg: Config, fail) -> None:
    from diffgrpo.tasks import names as task_names

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
    """The EPRLI levels (paper 002): required by the arms that select them, one data band each."""
    levels = cfg.eprli.levels
    users = [a.name for a in cfg.arms if a.select == "levels"]
    if users and not levels:
        fail("eprli.levels", f"is empty, and arms {users} select the levels' prompts; declare the levels")
    if not levels:
        return
    names = [lv.name for lv in levels]
    if len(set(names)) != len(names) or not all(names):
        fail("eprli.levels", f"names {names}: each level needs its own non-empty name")
    for i, lv in enumerate(levels):
        why = check_safe_name(lv.name, f"eprli.levels[{i}].name")
        if why:
            fail("eprli.levels", why)
        key = f"eprli.levels[{i}]"
        if (lv.p_hat is None) == (lv.tiers is None):
            fail(key, "sets both or neither of p_hat and tiers; its data is one of them")
        if lv.p_hat is not None and not (len(lv.p_hat) == 2 and 0.0 <= lv.p_hat[0] <= lv.p_hat[1] <= 1.0):
            fail(f"{key}.p_hat", f"= {lv.p_hat}: a band [lo, hi] with 0 <= lo <= hi <= 1")
        if lv.tiers is not None and not lv.tiers:
            fail(f"{key}.tiers", "is empty")
    total = sum(lv.steps for lv in levels)
    if cfg.train.max_steps is None:
        fail("eprli.levels", f"set their own steps (they add up to {total}); train.max_steps must be that sum, not "
                             f"train.epochs = {cfg.train.epochs:g}: set `train.max_steps: {total}` and `train.epochs: null`")
    if total != cfg.train.max_steps:
        fail("eprli.levels", f"steps add up to {total}, not train.max_steps = {cfg.train.max_steps}; a run's steps "
                             "are its levels' steps")
