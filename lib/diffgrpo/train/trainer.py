"""One step of GRPO as TRL runs it, and where diffgrpo changes it: the prompt order (resumable
per epoch), generation with the LoRA merged, dynamic sampling (DAPO's ``filter_groups``), and
the completion budget. Every use of a private method of TRL 1.16 is here, each beside its
guard (``BATCH_KEYS``; tests/test_train.py pins the methods' names and signatures)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import peft
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from peft.tuners.tuners_utils import BaseTunerLayer
from trl.trainer.utils import RepeatSampler

from diffgrpo.store import artifacts, layout
from diffgrpo.models import devices
from diffgrpo.models.generation import appending_cache
from diffgrpo.params import Config
from diffgrpo.train.levels import Level
from diffgrpo.online import Method, chosen, kept, piloted
from diffgrpo.train.records import Recorder


class EpochSampler(RepeatSampler):
    """TRL's sampler, reseeded from (seed, epoch) at each epoch. TRL's own draws every
    epoch's permutation from one generator, which a resume in a later epoch restarts."""

    def set_epoch(self, epoch: int) -> None:  # accelerate calls it before each epoch
        if self.shuffle:
            self.generator.manual_seed(int(self.seed or 0) * 1_000_003 + epoch)


@contextlib.contextmanager
def merged_lora(model):
    """The LoRA adapter merged into its base layers for the duration (generation): each
    projection is one matmul with W + s*B*A instead of PEFT's W x + s*B(A x), three matmuls
    and a Python layer, and the model calls the base layers directly. Afterwards the base weights are restored from copies, bit for bit
    (PEFT's own ``unmerge_adapter`` subtracts the delta again, which leaves rounding residue
    that would accumulate over a run). Logits differ from the unmerged model's by float
    rounding only (about 1e-7 relative); tests/test_train.py checks that sampled tokens agree."""

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if not layers or any(m.merged for m in layers):
        yield model
        return
    saved = [m.get_base_layer().weight.detach().clone() for m in layers]
    # merged, PEFT's layer only calls its base layer (a Python call per projection per token:
    # 40,000 in a run of the default study, 5% of its time): the base layers stand in for them
    slots = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if isinstance(child, BaseTunerLayer)]
    model.merge_adapter()
    try:
        for parent, name, child in slots:
            setattr(parent, name, child.get_base_layer())
        yield model
    finally:
        with torch.no_grad():
            for parent, name, child in slots:
                setattr(parent, name, child)
            for m, weight in zip(layers, saved):
                m.get_base_layer().weight.copy_(weight)
                m.merged_adapters = []


def rollout_seed(seed: int, group: int) -> int:
    """The seed of training seed ``seed``'s colocated vLLM engine in tensor-parallel group
    ``group`` (``process_index // vllm_tensor_parallel_size``, what TRL 1.16 seeds it with): a
    distinct rollout stream per training seed and per group, the same for every process of a
    group (they must sample alike) and for every session of a run. A resumed run restarts its
    engine with this seed, and transformers' Trainer then restores the generators' states saved
    with the checkpoint (``rng_state.pth``), from which an in-process engine's unseeded requests
    draw: the stream it would have had."""
    return int(np.random.SeedSequence([int(seed), int(group)]).generate_state(1)[0])


@contextlib.contextmanager
def seeded_engine(seed: int):
    """While TRL builds its colocated vLLM engine: the engine seeded with :func:`rollout_seed`
    of the run's ``seed`` instead of TRL 1.16's ``seed=process_index // tp`` (the same for every
    training seed; vLLM's worker then re-seeds torch's generators with it, so every seed of an
    arm would sample the same rollouts). ``VLLMGeneration.__init__`` calls the module's ``LLM``
    by name (``_init_vllm``; tests/test_train.py pins it). Without vLLM installed there is nothing to seed."""
    from trl.generation import vllm_generation

    build = getattr(vllm_generation, "LLM", None)
    if build is None:
        yield
        return

    def engine(*args, seed: int = 0, **kwargs):
        return build(*args, seed=rollout_seed(run_seed, seed), **kwargs)

    run_seed = seed
    vllm_generation.LLM = engine
    try:
        yield
    finally:
        vllm_generation.LLM = build


#: what TRL 1.16's ``_generate_and_score_completions`` returns for a text-only batch: the
#: tensors dynamic sampling cuts to the kept groups. Another key (a TRL upgrade, images, tools)
#: stops training rather than letting a tensor slip through uncut.
BATCH_KEYS = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch",
              "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio"}
LEFT_PADDED = ("prompt_ids", "prompt_mask")
#: the loss types whose loss is a mean over the rows (sequences) of a pass: a padded update is
#: weighed back to its kept rows (``loss_scale``). "dapo" divides by the update's token count
#: (``num_items_in_batch``), which padded rows do not enter; "bnpo" (each pass by its own tokens)
#: cannot weigh a part-filled update as one pass (:func:`check_levels_fit` refuses it).
ROW_MEAN_LOSSES = ("grpo", "dr_grpo")
#: per-step records of generation, always logged (steps.parquet)
GENERATION_METRICS = ("groups_generated", "groups_kept", "dropped_all_correct", "dropped_all_wrong",
                      "dropped_other", "generation_rounds", "completions_generated")


def _pad_to(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    extra = width - t.size(1)
    if extra <= 0:
        return t
    pad = t.new_full((t.size(0), extra), value)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def merge_batches(parts: list[tuple[dict, list[int]]], group_size: int, pad_token_id: int) -> dict:
    """The groups ``parts`` keep, as one generated batch: ``[(batch, group indices), ...]``,
    each batch as ``_generate_and_score_completions`` returned it. Sequences are re-padded to
    the longest (prompts on the left, completions on the right) and ``num_items_in_batch``
    recounted from the completion mask."""
    unknown = sorted({k for batch, _ in parts for k in batch} - BATCH_KEYS)
    if unknown:
        raise RuntimeError(f"TRL's generated batch has keys {unknown} that dynamic sampling does not know how to cut "
                           "(TRL changed, or images/tools are in use); see diffgrpo.train.BATCH_KEYS")
    rows = []
    for batch, groups in parts:
        idx = torch.tensor([g * group_size + j for g in groups for j in range(group_size)], dtype=torch.long)
        rows.append((batch, idx))
    out = {}
    for key in [k for k in parts[0][0] if k != "num_items_in_batch"]:
        pieces = [batch[key][idx.to(batch[key].device)] for batch, idx in rows]
        if pieces[0].dim() == 2:
            width = max(p.size(1) for p in pieces)
            value = pad_token_id if key.endswith("_ids") else 0
            pieces = [_pad_to(p, width, value, key in LEFT_PADDED) for p in pieces]
        out[key] = torch.cat(pieces, dim=0)
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


def pad_batch(batch: dict, rows: int) -> dict:
    """``batch`` with rows appended up to ``rows``: copies of its first rows with the completion
    masked out and advantage 0, so they add nothing to the loss, its gradient or
    ``num_items_in_batch``. Used so that a part-filled update still splits into TRL's
    ``steps_per_generation`` equal passes. The prompt's attention stays (a row with no attended
    token would give NaN logits, and NaN x 0 is NaN)."""
    have = batch["completion_mask"].size(0)
    if rows <= have:
        return batch
    if not have:
        raise ValueError("cannot pad an empty batch: no row to copy")
    idx = torch.arange(rows - have) % have
    out = {}
    for key, value in batch.items():
        if not torch.is_tensor(value) or value.dim() == 0:
            out[key] = value
            continue
        fill = value[idx.to(value.device)]
        if key in ("completion_mask", "advantages"):
            fill = torch.zeros_like(fill)
        out[key] = torch.cat([value, fill], dim=0)
    return out


def passes_rows(rows: int, passes: int) -> int:
    """Rows of an update padded so TRL splits it into ``passes`` equal, non-empty passes."""
    return max(passes, -(-rows // passes) * passes)


def loss_scale(loss_type: str, rows: int, n_processes: int, kept_rows: int) -> float:
    """What a padded update's loss is multiplied by so its gradient is that of its kept rows in
    one pass over them all: for a row-mean loss ("grpo", "dr_grpo") each of this process's
    ``rows`` rows weighs 1/rows in TRL's accumulation and processes average, while one pass over
    the ``kept_rows`` kept rows of every process weighs each 1/kept_rows. 1 for "dapo" (token
    normalised over the update) and when nothing is kept (no token enters the loss)."""
    if loss_type not in ROW_MEAN_LOSSES or kept_rows == 0:
        return 1.0
    return rows * n_processes / kept_rows


def check_levels_fit(levels: list[Level], cfg: Config, n_processes: int) -> None:
    """What dynamic sampling cannot do: with several passes per update (gradient accumulation,
    or several processes) a part-filled update is padded with masked rows, which weighs its
    groups as one pass over them would for the "grpo", "dr_grpo" and "dapo" losses
    (:func:`loss_scale`), not for "bnpo", which normalises each pass by its own tokens."""
    for lv in levels:
        if lv.dynamic_rounds is None or cfg.train.loss_type != "bnpo":
            continue
        b = devices.batching(lv.prompts_per_step, lv.group_size, n_processes, cfg.train.per_device_prompts)
        if n_processes > 1 or b.gradient_accumulation_steps > 1:
            raise ValueError(f"dynamic sampling with train.loss_type 'bnpo' needs one process and one pass per update "
                             f"(here {n_processes} process(es), {b.gradient_accumulation_steps} passes): bnpo "
                             "normalises each pass by its own tokens, so an update that dynamic sampling leaves "
                             "part-filled cannot weigh its groups as one pass does. Use loss_type dapo or grpo, or "
                             "set train.per_device_prompts to null and launch one process")


class Trainer(GRPOTrainer):
    """GRPOTrainer with a resumable prompt order, our rows saved with each checkpoint, and
    dynamic sampling (``dynamic_rounds``: generation rounds per update at most; None: off).

    Dynamic sampling (DAPO's, verl's ``filter_groups``) hooks the one method of TRL 1.16 that
    turns a batch of prompts into scored completions and advantages,
    ``_generate_and_score_completions``: the groups whose rewards are all equal (zero
    advantage) are dropped, and more prompts are generated until the update holds
    ``prompts_per_step`` mixed groups or ``dynamic_rounds`` rounds ran; the update then trains
    on what it holds (with no mixed group at all, every token is masked out of the loss). The
    extra prompts of round r of step s are a draw seeded by (seed, s, r) from the prompts not yet
    generated at that step, so a resumed run draws what an uninterrupted one did. Advantages are
    computed per round (per group with ``scale_rewards: group``, so combining rounds changes none).

    With gradient accumulation TRL splits the update into ``steps_per_generation`` equal passes:
    a part-filled update is padded with masked rows (:func:`pad_batch`) and, for a row-mean
    loss, its loss rescaled (:func:`loss_scale`), so its gradient is that of its kept groups in
    one pass. With several processes each fills its own share; they run the same number of
    rounds (until every process is full, or ``dynamic_rounds``), draw distinct extra prompts,
    and log the counts of all processes together.

    With ``merge_for_generation`` (``train.merge_lora_for_generation``) transformers generates
    with the LoRA merged into the base weights (:func:`merged_lora`). A colocated vLLM engine is
    seeded per training seed (:func:`seeded_engine`).

    ``online`` (``train.online``, :mod:`diffgrpo.online`): a method that chooses a step's
    prompts replaces the sampler's before generation (logged as ``online_skipped``: the
    sampler's prompts it skipped), after a pilot where it asks for one (``pilot_commit``: groups
    of round 0, not trained on); one that filters (``band``, dynamic sampling) decides which
    groups dynamic sampling keeps.
    """

    def __init__(self, *args, recorder: Recorder, run_dir: Path, dynamic_rounds: int | None = None,
                 merge_for_generation: bool = False, online: Method | None = None, **kwargs):
        config = kwargs["args"]
        colocated = config.use_vllm and config.vllm_mode == "colocate"
        with seeded_engine(config.seed) if colocated else contextlib.nullcontext():
            super().__init__(*args, **kwargs)
        self.recorder, self.run_dir, self.dynamic_rounds, self.online = recorder, run_dir, dynamic_rounds, online
        self.merge_for_generation = merge_for_generation and isinstance(self.model, peft.PeftModel)

    def _generate_single_turn(self, *args, **kwargs):
        # TRL 1.16: the one place that calls model.generate (HF) or vLLM for a batch of prompts
        if self.use_vllm:
            return super()._generate_single_turn(*args, **kwargs)
        # HF: a KV cache that appends in place (generation.append_cache), the LoRA merged if asked
        with (merged_lora(self.model) if self.merge_for_generation else contextlib.nullcontext(),
              appending_cache(self.model, self.max_completion_length)):
            return super()._generate_single_turn(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        g = self.num_generations
        wanted = len(inputs) // g  # this process's groups of the update
        n = self.accelerator.num_processes
        if self.online is not None and self.online.chooses:
            inputs = self._online_inputs(inputs)
        self.recorder.round = 1
        first = len(self.recorder.groups)
        batch = super()._generate_and_score_completions(inputs)
        counts = dict.fromkeys(GENERATION_METRICS, 0)
        counts["generation_rounds"] = 1
        if self.dynamic_rounds is None:  # every group enters the update, as TRL does (all processes')
            counts.update(groups_generated=wanted * n, groups_kept=wanted * n, completions_generated=len(inputs) * n)
            self._log_counts(counts)
            return batch
        seen = set(self._every_process([x["id"] for x in inputs]))
        parts, kept = [], 0
        while True:
            rows = self.recorder.groups[first:]
            self._count(counts, rows)
            take = [i for i, row in enumerate(rows) if self._keep(row)][:wanted - kept]
            for i, row in enumerate(rows):
                row["kept"] = i in take
            if take:
                parts.append((batch, take))
            kept += len(take)
            short = devices.sum_over_processes([int(kept < wanted)])[0]  # every process decides alike
            if not short or counts["generation_rounds"] >= self.dynamic_rounds:
                break
            counts["generation_rounds"] += 1
            self.recorder.round = counts["generation_rounds"]
            extra, drawn = self._draw_prompts(wanted, counts["generation_rounds"], seen)
            seen.update(drawn)
            first = len(self.recorder.groups)
            batch = super()._generate_and_score_completions([x for x in extra for _ in range(g)])
        counts["groups_kept"] = kept
        totals = devices.sum_over_processes([counts[k] for k in GENERATION_METRICS if k != "generation_rounds"])
        counts.update(zip([k for k in GENERATION_METRICS if k != "generation_rounds"], totals))
        self._log_counts(counts)
        if parts:
            out = merge_batches(parts, g, self._tokenizer.pad_token_id)
        else:  # nothing learnable here: an update whose loss has no token
            out = {**batch, "completion_mask": torch.zeros_like(batch["completion_mask"]),
                   "advantages": torch.zeros_like(batch["advantages"])}
        # TRL splits the update into equal passes and gathers per-row metrics of each pass over
        # the processes: every process's update padded to the same rows
        rows = passes_rows(out["completion_mask"].size(0), self.args.steps_per_generation)
        out = pad_batch(out, max(self._every_process([rows])))
        local = out["completion_mask"].sum()
        out["num_items_in_batch"] = self.accelerator.gather(local).sum() if n > 1 else local
        scale = loss_scale(self.loss_type, out["completion_mask"].size(0), n, counts["groups_kept"] * g)
        if scale != 1.0:
            out["loss_scale"] = torch.tensor(scale, device=local.device)
        return out

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        return loss if "loss_scale" not in inputs else loss * inputs["loss_scale"]

    def _keep(self, group: dict) -> bool:
        """Whether dynamic sampling keeps a generated group: its rewards differ (and, with
        ``train.online.method: band``, their mean lies in the band; a method's answer checked)."""
        return kept(self.online, group, self.recorder.step_offset + self.state.global_step + 1) \
            if self.online is not None else bool(group["learnable"])

    def _online_inputs(self, inputs: list[dict]) -> list[dict]:
        """The step's prompts as the online method chooses them (each repeated ``group_size``
        times, as TRL's sampler gives them), in place of the sampler's."""
        g, ds = self.num_generations, self.train_dataset
        step = self.recorder.step_offset + self.state.global_step + 1
        if not hasattr(self, "_row_of_id"):
            self._row_of_id = {pid: i for i, pid in enumerate(ds["id"])}
        batch = [x["id"] for x in inputs[::g]]
        pilot = piloted(self.online, batch, self.recorder.groups, step)
        if pilot is not None:
            self._pilot(*pilot)
        ids, skipped = chosen(self.online, batch, self.recorder.groups, step)  # checked: the run's ids, enough
        self._metrics["train"]["online_skipped"].append(float(skipped))
        return [ds[self._row_of_id[pid]] for pid in ids for _ in range(g)]

    def _pilot(self, ids: list, m: int) -> None:
        """Generate and score ``m`` completions of each prompt ``ids``, recorded as groups of
        round 0 that no update takes (the online method reads them; the ledger charges them).
        TRL groups rewards by ``num_generations``: the pilot's group size for the while."""
        ds, g = self.train_dataset, self.num_generations
        first = len(self.recorder.groups)
        self.num_generations = self.recorder.group_size = m
        self.recorder.round = 0
        try:
            super()._generate_and_score_completions([ds[self._row_of_id[pid]] for pid in ids for _ in range(m)])
        finally:
            self.num_generations = self.recorder.group_size = g
        for row in self.recorder.groups[first:]:
            row["kept"] = False

    def _every_process(self, items: list) -> list:
        """``items`` of every process (in rank order); this process's alone when it is the only one."""
        if self.accelerator.num_processes == 1:
            return list(items)
        from accelerate.utils import gather_object

        return list(gather_object(list(items)))

    def _draw_prompts(self, n: int, generation_round: int, seen: set) -> tuple[list[dict], list]:
        """``n`` dataset rows for an extra round, and the ids every process drew: seeded by
        (seed, step, round), drawn from the prompts this step has not generated yet (all of them
        once fewer are left than processes). Every process draws the same ``n`` x processes and
        takes its own slice, so processes get distinct prompts and equally many (TRL gathers
        their rewards)."""
        ds = self.train_dataset
        procs, rank = self.accelerator.num_processes, self.accelerator.process_index
        ids = ds["id"]
        fresh = [i for i, pid in enumerate(ids) if pid not in seen]
        if len(fresh) < procs:
            fresh = list(range(len(ds)))
        rng = np.random.default_rng([self.args.seed, self.recorder.step_offset + self.state.global_step + 1,
                                     generation_round])
        each = min(n * procs, len(fresh)) // procs
        chosen = [int(fresh[i]) for i in rng.choice(len(fresh), size=each * procs, replace=False)]
        return [ds[i] for i in chosen[rank * each:(rank + 1) * each]], [ids[i] for i in chosen]

    @staticmethod
    def _count(counts: dict, rows: list[dict]) -> None:
        for row in rows:
            counts["groups_generated"] += 1
            counts["completions_generated"] += len(row["rewards"])
            if not row["learnable"]:
                scores = np.asarray(row["scores"])
                key = ("dropped_all_correct" if (scores == 1).all() else
                       "dropped_all_wrong" if (scores == 0).all() else "dropped_other")
                counts[key] += 1

    def _log_counts(self, counts: dict) -> None:
        for name, value in counts.items():
            self._metrics["train"][name].append(float(value))

    def _get_train_sampler(self, dataset=None):
        return EpochSampler(
            data_source=dataset if dataset is not None else self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def _save_checkpoint(self, model, trial):
        # rows first: a crash mid-save leaves rows past the checkpoint, which a resume drops
        self.recorder.write(self.run_dir)
        super()._save_checkpoint(model, trial)
        ckpt = layout.checkpoint(Path(self.args.output_dir), self.state.global_step)
        if ckpt.is_dir():  # safetensors writes the adapter 0600; every file follows the umask (README)
            artifacts.follow_umask(ckpt)




class Budget(TrainerCallback):
    """Stops training (and saves) at the first step whose generated completions reach the
    level's budget, counted from ``before`` (the completions of earlier levels). With several
    processes the count is every process's (summed, so all stop at the same step): the main
    process holds the groups of earlier sessions, each process those it scored in this one.
    Every process must call :meth:`spent` at the same points (it is a collective).

    ``marks``: smaller budgets whose runs are checkpoints of this one
    (:func:`diffgrpo.params.budgets.checkpoint_of`): the first step whose completions reach each
    is saved too, the step a run of that budget would stop at. Saving changes no step after it."""

    def __init__(self, recorder: Recorder, budget: int | None, before: int, marks: tuple[int, ...] = ()):
        self.recorder, self.budget, self.before = recorder, budget, before
        self.marks = sorted(marks)
        self.passed: set[int] | None = None  # the marks reached before this session's first step end

    def generated(self) -> int:
        return devices.sum_over_processes([self.recorder.completions_generated() - self.before])[0]

    def spent(self) -> bool:
        if self.budget is None:
            return False
        return self.generated() >= self.budget

    def on_train_begin(self, args, state, control, **kwargs):
        if self.marks:  # a resumed run saved the marks it reached before it stopped
            n = self.generated()
            self.passed = {m for m in self.marks if n >= m}

    def on_step_end(self, args, state, control, **kwargs):
        n = self.generated() if self.marks or self.budget is not None else 0
        if self.budget is not None and n >= self.budget:
            control.should_training_stop = True
            control.should_save = True
        for m in self.marks:
            if m not in (self.passed or set()) and n >= m:
                self.passed = (self.passed or set()) | {m}
                control.should_save = True
