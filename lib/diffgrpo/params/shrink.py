"""A params file's own study at the smallest size that still runs each of its arms through every
stage on this machine's CPU: what ``tests/test_every_params_file.py`` runs for every file in
``params/``, so a protocol whose training, ledger or report breaks fails in ``make test``, not an
hour into a GPU job or on a user's fresh clone.

:func:`shrunk` writes a params file that includes the original and layers one shared override on
it: a 16-prompt pool, 4 test prompts per set, K = 2, one seed, 2 updates (or the file's epochs) of 2 prompts x 4
completions, every EPRLI level 1 update on 4 prompts. A model this machine cannot run (a GPU
file's, a hub id) becomes the random tiny model of ``params/smoke.yaml`` on the CPU with the HF
backend, and a hub dataset the file names is read from ``sources`` (task -> a local file or
``offline``), since no hub is reachable here. Arms that differ only by their budget
(``online_vs_offline``'s ``.b576`` / ``.b960`` / ``.b1344``) run once: the first of each kind.
What stays the file's own: every policy, charge, online method, curriculum, control, reward and
report it names, its task and its evaluation sets. A file with an arm that picks a set by what
the probe found (:func:`_needs_answers`) runs on the embedded model and its task instead (the
random model answers nothing, so that set would be empty); its evaluation sets of other tasks are
left out there (their prompts overrun the embedded model's context; other files score them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from diffgrpo import policies
from diffgrpo.params import schema
from diffgrpo.store import artifacts

#: the model every file runs whose own model this machine cannot run (params/smoke.yaml's)
CPU_MODEL = {"name": "tiny-random", "path": "tiny-random", "gguf_file": None, "dtype": "float32",
             "torch_threads": 1, "device": "cpu"}
#: the packaged model and the task it was built for (params/embedded_full.yaml's)
EMBEDDED_MODEL = {**CPU_MODEL, "name": "embedded", "path": "embedded"}
EMBEDDED_TASK = {"task": "shuffled_objects", "source": None, "train_split": "train", "test_split": "test",
                 "task_options": {"people": [3, 5], "swaps": [1, 8], "train_size": 2000, "test_size": 400, "seed": 0}}
#: the embedded model's generation length cap (its gold traces: up to 63 tokens; a context of 256, which
#: a protocol file written for real models, paper003_released_code.yaml's 250 tokens, overruns)
EMBEDDED_TOKENS = 72
#: models this machine runs as they are (packaged or built here)
CPU_MODELS = ("embedded", "tiny-random")
STEPS, PROMPTS_PER_STEP, GROUP_SIZE, POOL, TEST = 2, 2, 4, 16, 4
#: a generation length for the random tiny model (it answers nothing; longer costs time only)
TINY_TOKENS = 8


def _arm_kind(arm: schema.ArmConfig) -> str:
    """What an arm trains, without its name or budget: arms that differ only there run once."""
    d = arm.model_dump()
    d.pop("name")
    d["train"] = {k: v for k, v in d["train"].items() if k not in ("max_completions", "max_steps")}
    return json.dumps(d, sort_keys=True, default=str)


def _arm(arm: schema.ArmConfig) -> dict[str, Any]:
    d = arm.model_dump(exclude_defaults=True)
    d.setdefault("name", arm.name)
    d.setdefault("select", arm.select)
    train = dict(d.get("train", {}))
    for key in ("max_completions", "max_steps"):
        if train.get(key) is not None:
            train[key] = None
    for key, value in (("group_size", GROUP_SIZE), ("prompts_per_step", PROMPTS_PER_STEP)):
        if key in train:
            train[key] = value
    d["train"] = train
    d.pop("budget_count", None)
    d.pop("budget_frac", None)
    return d


def _needs_answers(cfg: schema.Config, arm: schema.ArmConfig) -> bool:
    """Whether ``arm`` selects nothing from a model that answers nothing right: a policy that picks
    a set by what the probe found rather than a budget's count (001's base-right, 003's released
    code's p_hat buckets, 000's tiers or 002's levels where the task has no tiers of its own and
    p_hat cuts them)."""
    from diffgrpo.tasks import splits

    policy = policies.get(arm.select)
    if policy.budgeted or not policy.reads_probe:
        return False
    return not (arm.select in ("tiers", "levels") and getattr(splits.task_of(cfg), "tiers", None))


def overrides(cfg: schema.Config, sources: dict[str, str] | None = None) -> dict[str, Any]:
    """The shared override of ``cfg`` (a loaded params file), as a nested params dict."""
    sources = sources or {}
    tiny_model = cfg.model.device != "cpu" or cfg.model.path not in CPU_MODELS
    answers = tiny_model and any(_needs_answers(cfg, a) for a in cfg.arms)
    cap = (EMBEDDED_TOKENS if answers or (not tiny_model and cfg.model.path == "embedded")
           else TINY_TOKENS if tiny_model or cfg.model.path == "tiny-random" else None)
    tokens = (lambda n: n) if cap is None else (lambda n: min(n, cap))
    levels = cfg.eprli.levels if any(a.select == "levels" for a in cfg.arms) else []
    out: dict[str, Any] = {"study": f"{cfg.study}-shrunk", "workers": 2}
    # an arm that selects by right answers (:func:`_needs_answers`) needs a model that answers some
    # (``answers``): the embedded one, on the task it was built for (the random one answers none)
    if tiny_model:
        out["model"] = dict(EMBEDDED_MODEL if answers else CPU_MODEL)
        out["generation"] = {"backend": "hf"}
    dataset: dict[str, Any] = {"pool_size": 2 * POOL if levels else POOL, "test_size": TEST}  # a band of each level
    if answers:
        dataset.update(EMBEDDED_TASK)
    elif cfg.dataset.source in (None, "hub") and cfg.dataset.task in sources:
        dataset.update(_source(sources[cfg.dataset.task]))
    out["dataset"] = dataset
    # a level's p_hat band needs K fine enough to fall in it (002's [0.125, 0.375]: K = 8)
    out["probe"] = {"k": min(cfg.probe.k, 8) if levels else 2, "sampling": {"max_new_tokens": tokens(cfg.probe.sampling.max_new_tokens), "batch_size": 64}}
    out["select"] = {"budget_frac": 0.25, "budget_count": None}  # 4 of the 16: two updates of 2
    kinds: dict[str, dict] = {}
    for arm in cfg.arms:
        kinds.setdefault(_arm_kind(arm), _arm(arm))
    out["arms"] = list(kinds.values())
    kept = {a["name"] for a in out["arms"]}  # the declared question: its contrasts between the arms kept
    out["analyze"] = {"primary": [f"{a} - {b}" for a, b in schema.primary_pairs(cfg) if a in kept and b in kept]}
    train: dict[str, Any] = {
        "seeds": cfg.train.seeds[:1], "max_steps": None if cfg.train.epochs else len(levels) or STEPS, "prompts_per_step": PROMPTS_PER_STEP,
        "group_size": GROUP_SIZE, "save_steps": 1, "max_completions": None,
        "max_completion_length": tokens(cfg.train.max_completion_length)}
    if tiny_model:
        train.update({"per_device_prompts": None, "bf16": False, "gradient_checkpointing": False, "use_vllm": False,
                      "trl": {"vllm_max_model_length": None, "vllm_enable_sleep_mode": False}})
    out["train"] = train
    if levels:
        out["eprli"] = {"levels": [{**level.model_dump(), "prompts": PROMPTS_PER_STEP, "steps": 1, "group_size": GROUP_SIZE,
                                    "buffer_size": 2, "max_completion_length": tokens(level.max_completion_length)}
                                   for level in levels]}
    sets = []
    for s in cfg.evaluate.sets:
        d = {**s.model_dump(exclude_none=True), "size": TEST}
        if s.n_samples is not None or s.pass_k is not None:
            d.update({"n_samples": 2, "pass_k": [1, 2]})
        task = s.task or cfg.dataset.task
        if answers and task != EMBEDDED_TASK["task"]:
            continue  # its prompts (AIME's: 577 tokens) overrun the embedded model's 256 positions
        if s.source in (None, "hub") and task in sources:
            d.update({("split" if k == "train_split" else "source"): v for k, v in _source(sources[task]).items()})
        if s.max_new_tokens is not None:
            d["max_new_tokens"] = tokens(s.max_new_tokens)
        sets.append(d)
    out["evaluate"] = {"n_samples": 2, "pass_k": [1, 2], "sets": sets,
                       "sampling": {"max_new_tokens": tokens(cfg.evaluate.sampling.max_new_tokens), "batch_size": 64}}
    return out


def _source(source: str) -> dict[str, str]:
    """A local file or ``offline`` holds the rows a hub dataset's train split would: read the
    file's only split (``test``) for both."""
    return {"source": source, "train_split": "test"}


def shrunk(name: str | Path, folder: Path, sources: dict[str, str] | None = None) -> Path:
    """Write ``folder/<stem>_shrunk.yaml``: the params file ``name`` with the shared override
    layered on it (it includes the original, so everything else is the file's own)."""
    from diffgrpo import params

    path = params.resolve(name)
    cfg = params.load(path)
    out = {"include": str(path), **overrides(cfg, sources)}
    # atomically (a temporary file renamed): two test workers write the same file at collection,
    # and a plain write let one read the other's half-written file
    return artifacts.write_text(folder / f"{Path(path).stem}_shrunk.yaml", yaml.safe_dump(out, sort_keys=False))
