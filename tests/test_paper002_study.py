"""Paper 002's study end to end (issue 10), shrunk: params/paper002_embedded.yaml with a small
pool, two 3-step levels and a 96-completion budget, through the study runner (papermill).
Checks that each arm spent the budget the way its training says, that EPRLI ran its levels in
order, and that summary.json's "002" section agrees with the run files."""

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from diffgrpo import study

LEVEL = {"tiers": None, "prompts": 6, "steps": 3, "max_completion_length": 72, "epsilon": 0.2, "epsilon_high": 0.28,
         "group_size": 4, "buffer_size": 4, "dynamic_sampling": True, "length_reward_weight": 0.5}
SMALL = {
    "include": "paper002_embedded.yaml", "study": "paper002_small", "workers": 1,
    "dataset": {"pool_size": 60, "test_size": 24},
    "probe": {"k": 4},
    "train": {"seeds": [0], "max_steps": 6, "prompts_per_step": 4, "group_size": 4, "max_completions": 96, "save_steps": 3,
              "lora": {"r": 4, "alpha": 8}},
    "eprli": {"levels": [{"name": "easy", "p_hat": [0.5, 1.0], **LEVEL},
                         {"name": "hard", "p_hat": [0.0, 0.49], **LEVEL, "max_completion_length": 64}]},
    "evaluate": {"n_samples": 2, "pass_k": [1, 2]},
}


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    path = tmp_path_factory.mktemp("params") / "paper002_small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    assert study.main([str(path), "--kernel", "python3"]) == 0
    return Path(os.environ["DIFFGRPO_OUTPUTS"]) / "paper002_small"


@pytest.mark.slow
def test_paper002_arms_spend_one_budget_and_the_report_says_so(small_study):
    summary = json.loads((small_study / "report" / "summary.json").read_text())
    section = summary["002"]
    assert set(section["arms"]) == {"eprli-seed0", "eprli_grpo-seed0", "eprli_dynamic-seed0"}
    assert section["budget"]["max_completions"] == 96
    assert {r["dataset"] for r in section["reported"]} >= {"aime24", "math500"}
    for rid, arm in section["arms"].items():
        run = small_study / "runs" / rid
        groups = pd.read_parquet(run / "groups.parquet")
        manifest = json.loads((run / "manifest.json").read_text())
        assert arm["completions_generated"] == int(groups["rewards"].map(len).sum()) == manifest["completions_generated"]
        assert arm["learnable_generated_pct"] == pytest.approx(100 * groups["learnable"].mean(), abs=1e-3)
        assert arm["steps"] == manifest["steps_done"]
        final = pd.read_parquet(small_study / "eval" / rid / "summary.parquet")
        assert arm["acc"] == pytest.approx(final.loc[final["step"].idxmax(), "greedy_acc"], abs=1e-4)
    grpo, dyn, eprli = (section["arms"][f"{s}-seed0"] for s in ("eprli_grpo", "eprli_dynamic", "eprli"))
    # single-level GRPO: every group, 6 x 4 x 4 = the budget exactly; the others stop at it
    assert grpo["completions_generated"] == 96 and grpo["steps"] == 6
    assert dyn["learnable_kept_pct"] == 100.0 and dyn["completions_generated"] >= 96
    # EPRLI: two levels in order, each with half the budget, each ending on an evaluated checkpoint
    assert [lv["level"] for lv in eprli["levels"]] == ["easy", "hard"]
    assert eprli["levels"][1]["first_step"] == eprli["levels"][0]["last_step"] + 1
    assert all(lv["completions_generated"] >= 48 for lv in eprli["levels"])
    assert all(lv["acc_at_end"] is not None for lv in eprli["levels"])
    assert eprli["learnable_kept_pct"] == 100.0
    assert (small_study / "report" / "table_eprli.md").read_text().startswith("# Paper 002")
    assert "aime24" in (small_study / "report" / "table_eprli.md").read_text()  # the paper's numbers beside ours
    levels = pd.read_parquet(small_study / "runs" / "eprli-seed0" / "groups.parquet").groupby("level")["step"].agg(["min", "max"])
    assert levels.loc["easy", "max"] < levels.loc["hard", "min"]
    assert np.isfinite([grpo["acc"], dyn["acc"], eprli["acc"]]).all()
