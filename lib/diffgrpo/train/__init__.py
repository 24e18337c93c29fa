"""Stage 3: GRPO with LoRA on one selection, through TRL's GRPOTrainer and PEFT.

By concern: :mod:`.launch` (how one run is launched: in process, its levels apart, accelerate), :mod:`.run` (one run trained, resumed where it stopped), :mod:`.config` (GRPOConfig and
LoRA), :mod:`.trainer` (one GRPO step as TRL runs it and where diffgrpo changes it: prompt
order, merged-LoRA generation, dynamic sampling, the completion budget), :mod:`.online` (online
selection: a reward band, a Beta posterior, zero-variance skipping), :mod:`.ledger` (what a run
cost, the probe charged), :mod:`.records` (groups and steps; learnable %); paper 002's EPRLI levels are :mod:`diffgrpo.train.levels`. One run from the command line, or on several GPUs
(``train.num_processes``, which a run with N > 1 also starts by itself: :mod:`.launch`)::

    accelerate launch --multi_gpu --num_processes 4 -m diffgrpo.train paper003_gsm8k_qwen3_4b --arm hard --seed 0 \
        --set train.num_processes=4
"""

from diffgrpo import lazy_names

#: the package's public names and the module of each: loaded on first use, so that reading a
#: study's levels (:mod:`.levels`, which the plan does) imports neither TRL nor PEFT
_PUBLIC = {
    **dict.fromkeys(("checkpointing_argument", "grpo_kwargs", "lora_config"), "config"),
    **dict.fromkeys(("Level", "is_levels_run", "run_levels"), "levels"),
    **dict.fromkeys(("GROUP_COLUMNS", "Recorder"), "records"),
    **dict.fromkeys(("RunSpec", "launch", "levels_apart", "main", "resolve", "train_run", "train_runs"), "launch"),
    **dict.fromkeys(("selected_rows", "train_here", "training_context"), "run"),
    **dict.fromkeys(("GENERATION_METRICS", "Trainer", "merge_batches", "merged_lora", "rollout_seed",
                     "seeded_engine"), "trainer"),
}
__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
