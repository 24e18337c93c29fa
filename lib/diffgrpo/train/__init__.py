"""Stage 3: GRPO with LoRA on one selection, through TRL's GRPOTrainer and PEFT.

By concern: :mod:`.run` (one run, resumed where it stopped), :mod:`.config` (GRPOConfig and
LoRA), :mod:`.trainer` (one GRPO step as TRL runs it and where diffgrpo changes it: prompt
order, merged-LoRA generation, dynamic sampling, the completion budget), :mod:`.records`
(groups and steps; learnable %); paper 002's EPRLI levels are :mod:`diffgrpo.train.levels`. One run from the command line, or on several GPUs
(``train.num_processes``, which a run with N > 1 also starts by itself: :func:`.run.launch_run`)::

    accelerate launch --multi_gpu --num_processes 4 -m diffgrpo.train paper003_gsm8k_qwen3_4b --arm hard --seed 0 \
        --set train.num_processes=4
"""

from diffgrpo.train.config import checkpointing_argument, grpo_kwargs, lora_config
from diffgrpo.train.levels import Level, run_levels
from diffgrpo.train.records import GROUP_COLUMNS, Recorder
from diffgrpo.train.run import main, selected_rows, train_run, train_runs
from diffgrpo.train.trainer import GENERATION_METRICS, Trainer, merge_batches, merged_lora

__all__ = ["GENERATION_METRICS", "GROUP_COLUMNS", "Level", "Recorder", "Trainer", "checkpointing_argument",
           "grpo_kwargs", "lora_config", "main", "merge_batches", "merged_lora", "run_levels",
           "selected_rows", "train_run", "train_runs"]
