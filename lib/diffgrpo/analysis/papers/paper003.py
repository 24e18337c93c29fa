"""Paper 003 (Pikus et al., "Hard Examples Are All You Need"): Tables 1-4 and Figure 3 from our
runs, beside the paper's numbers.

- Table 1: accuracy change (points) from the base model per arm, with its 95% interval;
- Table 2: learnable %, the share of (step, prompt) groups with nonzero reward std;
- Table 3 is Table 1 on a weaker base model: a study of its own (``params/paper003_table3_*``);
  its reported rows appear beside Table 1;
- Table 4: pass@k of the base model and each arm's final checkpoint on every evaluation set
  (003: pass@8 on AIME 2025-I, out of distribution after training on GSM8K; the embedded
  default: its OOD set of longer swap chains);
- Figure 3: learnable % vs gain, one point per run, with the least-squares line and R^2 (and
  its interval, resampling arms then seeds) over the arms that train on the verifier's reward,
  a control arm drawn apart (hollow, labelled, not in the fit), beside the same fit over the
  paper's reported points.

Section ``"003"`` of summary.json: ``{"table4": [{"arm", "eval_set", "k", "pass_at_k"}]}``,
pass@k as a fraction, the mean over the arm's seeds at each run's final checkpoint (arm
``base``: the base model).
"""

from __future__ import annotations

import pandas as pd

from diffgrpo.analysis import figures
from diffgrpo.store import layout
from diffgrpo.store.artifacts import save_figure, write_csv, write_text
from diffgrpo.analysis.tables import DIGITS, beside, final_checkpoints, markdown, arm_order, summarize
from diffgrpo.analysis.papers import paper_numbers


#: the report's markdown tables and figures in the report folder, in reading order (the notebook shows them)
TABLES = ("table1_gain", "table2_learnable", "table4_pass_k", "paper_regression")
FIGURES = ("fig3_learnable_vs_gain",)


def pass_k_rows(set_evals: pd.DataFrame) -> pd.DataFrame:
    """Table 4's data: per evaluation set, arm and k, pass@k (fraction) of the base model and of
    each arm's final checkpoint, mean over seeds (``n``: how many)."""
    rows = []
    for eval_set, ev in set_evals.groupby("eval_set", sort=False):
        base = ev[(ev["run_id"] == layout.BASE_RUN) & (ev["step"] == 0)].assign(strategy=layout.BASE_RUN)
        points = pd.concat([base, final_checkpoints(ev)], ignore_index=True)
        for col in sorted((c for c in ev.columns if c.startswith("pass@")), key=lambda c: int(c.removeprefix("pass@"))):
            g = points.dropna(subset=[col]).groupby("strategy", sort=False)[col].agg(["mean", "count"])
            rows += [{"arm": arm, "eval_set": eval_set, "k": int(col.removeprefix("pass@")), "pass_at_k": m, "n": int(n)}
                     for arm, (m, n) in g.iterrows()]
    out = pd.DataFrame(rows, columns=["arm", "eval_set", "k", "pass_at_k", "n"])
    rank = {s: i for i, s in enumerate(arm_order(out["arm"]))}
    return out.sort_values(["eval_set", "k", "arm"], key=lambda c: c.map(rank) if c.name == "arm" else c,
                           kind="stable").reset_index(drop=True)


def write(study) -> dict:
    """Tables 1, 2, 4 and Figure 3 into the report folder; the ``"003"`` section."""
    runs, rep, out = study.runs, study.rep, study.out
    gains = summarize(runs, "gain_pp").merge(study.arms[["strategy", "ci_low", "ci_high"]], on="strategy", how="left")
    study.write_long("table1_gain", f"Table 1: accuracy change from the base model (points, {study.metric}, final "
                     f"checkpoint; ours: mean over seeds [95% interval over {study.over}]); 003's Table 3 "
                     "(the weak baseline) below it", beside(gains, rep, ["gain_pp"]))
    study.write_long("table2_learnable", "Table 2: learnable % ((step, prompt) groups with nonzero reward std)",
                     beside(summarize(runs, "learnable_pct"), rep, ["learnable_pct"]))

    table4 = pass_k_rows(study.set_evals)
    ours = table4.assign(strategy=table4["arm"], dataset=table4["eval_set"], model=study.label["model"],
                         metric="pass@" + table4["k"].astype(str), value=100.0 * table4["pass_at_k"], sd=float("nan"))
    pass_metrics = sorted(set(ours["metric"]) | {m for m in rep["metric"] if m.startswith("pass@")})
    study.write_long("table4_pass_k", "Table 4: pass@k (percent, unbiased estimator) of the base model and each arm's "
                     "final checkpoint on every evaluation set (ours; `test` is the training task's held-out set) "
                     "beside 003's pass@8 on AIME 2025-I", beside(ours, rep, pass_metrics))

    points = paper_numbers.paper_points(rep)
    regs = paper_numbers.paper_regressions(points)
    paper_fit = paper_numbers.paper_regression(points, rep)
    write_csv(out / "paper_regression.csv", regs)
    write_text(out / "paper_regression.md", "# Figure 3 refit from the paper's reported points\n\n"
               + (markdown(regs) if len(regs) else "(no reported points)\n") + f"\n{paper_fit['note'] or ''}\n")
    save_figure(figures.plot_learnable_vs_gain(runs, points, "003" if len(points) else None,
                                               paper_numbers.stated_r2(rep), study.regression["r2_ci95"],
                                               control=study.control),
                out / "fig3_learnable_vs_gain.png")
    return {"table4": [{"arm": r["arm"], "eval_set": r["eval_set"], "k": int(r["k"]),
                        "pass_at_k": round(float(r["pass_at_k"]), DIGITS)} for r in table4.to_dict("records")]}
