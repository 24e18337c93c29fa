"""What a study costs before it starts: tokens, memory and time per job, without loading weights.

    python -m diffgrpo.study paper003_gsm8k_qwen3_4b --plan     # the table, then exit

For every job of the study graph (:func:`diffgrpo.study.graph.jobs`: the probe, each run's
training and evaluation, the base model's evaluation) the plan counts prompts, completions and
tokens generated and trained on, sizes the memory of its largest pass on ``gpu`` (params key
``gpu``, :data:`GPUS`) and gives a time range for the backend the params choose (HF or vLLM).
A cuda study whose plan does not fit the GPU is refused with :class:`PlanDoesNotFit`, naming
the job, the pass, the GiB against the GiB and the key to change.

- :mod:`.shapes`: the model's shape from its ``config.json`` (offline), and the GPUs;
- :mod:`.work`: the work of each job (rows per split, a run's steps and levels, checkpoints),
  from the params and the facts each task declares (its prompt length, its rows per split);
- :mod:`.memory`: GiB of a training pass and of a generation, term by term;
- :mod:`.hours`: seconds as (low, high) ranges from the throughput figures;
- :mod:`.table`: the per-job table (:func:`plan`), :func:`check`, :func:`render` and the few lines of
  :func:`brief` that the notebooks print.

    from diffgrpo.study import graph, plan
    table = plan.plan(cfg, graph.jobs(cfg, {"params_file": "tiny", "overrides": {}}))
    print(plan.render(cfg, table)); plan.check(cfg, table)
"""

from diffgrpo.models.vllm_engine import vllm_lora_rank
from diffgrpo.study.plan.hours import THROUGHPUT
from diffgrpo.study.plan.memory import (GIB, LM_HEAD_TILE, LORA_BYTES_PER_PARAM, USABLE, GenMemory, TrainMemory,
                                        generation_memory, train_memory)
from diffgrpo.study.plan.shapes import CONFIGS_DIR, GPU, GPUS, ModelShape, PlanError, gpu_of, model_shape
from diffgrpo.study.plan.table import PlanDoesNotFit, brief, check, plan, problems, render
from diffgrpo.study.plan.work import (TrainWork, checkpoints, prompt_tokens, selected_prompts, split_rows,
                                      train_work)

__all__ = ["CONFIGS_DIR", "GIB", "GPU", "GPUS", "LM_HEAD_TILE", "LORA_BYTES_PER_PARAM", "THROUGHPUT", "USABLE",
           "GenMemory", "ModelShape", "PlanDoesNotFit", "PlanError", "TrainMemory", "TrainWork", "brief", "check", "checkpoints",
           "generation_memory", "gpu_of", "model_shape", "plan", "problems", "prompt_tokens", "render",
           "selected_prompts", "split_rows", "train_memory", "train_work", "vllm_lora_rank"]
