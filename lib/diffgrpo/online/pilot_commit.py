"""``pilot_commit``: each step first generates a small pilot, ``pilot`` completions of each of
``candidates`` prompts (the sampler's and others of the selection, seeded); then the step's
groups are committed to the prompts the pilot found informative: those whose pilot rewards
differ first, then the rest nearest a pilot success rate of 0.5. The pilot is charged: its
completions are groups of round 0 in ``groups.parquet`` (kept: false), so the ledger's
completions generated, and the run's completion budget, count them.

The rule is Pilot-Commit's (arXiv:2605.26606, which reports 1.5-1.9x fewer cumulative rollouts
than GRPO): a cheap pilot per candidate prompt, then the rest of the rollouts committed to the
informative ones. The paper was not at hand when this was written (not in the project's
sources); the rule is the one issue 38 states. Ours: TRL's step keeps its shape
(``prompts_per_step`` groups of ``group_size``), so the pilot is spent on top of the step's
groups, not out of them, and the pilot's completions are not trained on; "informative" is
"rewards differ", ties broken by the pilot's success rate nearest 0.5, then the seeded order.

Chooses before generation (one training process).
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field

from diffgrpo.online.base import Method, PosInt, Settings, register


class PilotCommitSettings(Settings):
    pilot: Annotated[int, Field(ge=2)] = 2  # completions per candidate in the pilot (2: the fewest that can differ)
    candidates: PosInt | None = None  # prompts piloted per step; null: twice train.prompts_per_step

    def problems(self, train: Any) -> list[tuple[str, str]]:
        out = []
        if self.pilot >= train.group_size:
            out.append(("pilot", f"= {self.pilot}: a pilot smaller than a group (train.group_size = "
                                 f"{train.group_size}), else it is no cheaper than training on every candidate"))
        if self.candidates is not None and self.candidates <= train.prompts_per_step:
            out.append(("candidates", f"= {self.candidates}: more than train.prompts_per_step = "
                                      f"{train.prompts_per_step}, else the pilot chooses nothing"))
        return out


@register("pilot_commit")
class PilotCommit(Method):
    Settings = PilotCommitSettings
    when = "before"
    cost = "its training groups and its pilot's completions (groups of round 0)"

    def pilot(self, batch: list, history: list[dict], step: int) -> tuple[list, int]:
        n = self.settings.candidates or 2 * len(batch)
        taken = set(batch)
        others = [self.ids[i] for i in self.rng(step).permutation(len(self.ids)) if self.ids[i] not in taken]
        return (list(batch) + others)[:max(n, len(batch))], self.settings.pilot

    def choose(self, batch: list, history: list[dict], step: int) -> tuple[list, int]:
        pilots = [g for g in history if g["step"] == step and g.get("round") == 0]
        order = {pid: i for i, pid in enumerate(g["prompt_id"] for g in pilots)}

        def rank(g: dict) -> tuple:
            return (not g["learnable"], abs(float(np.mean(g["scores"])) - 0.5), order[g["prompt_id"]])

        committed = [g["prompt_id"] for g in sorted(pilots, key=rank)][:len(batch)]
        committed += [pid for pid in batch if pid not in committed][:len(batch) - len(committed)]
        return committed, sum(pid not in committed for pid in batch)
