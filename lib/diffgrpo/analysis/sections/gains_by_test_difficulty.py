"""Test prompts by difficulty (with ``probe.test``, the base model probed on the test set too):
every arm's gain per test-difficulty bin (``analyze.test_bins``), and each arm scored on the test
prompts of its own training difficulty beside the common test set, as 003's released code scored
its arms, with the spread between the first and last arm under both and the share of the
matched spread that the scoring makes, with its interval (``spread.share_removed``:
:mod:`diffgrpo.analysis.by_test_difficulty`).

Writes ``test_bins.csv`` / ``.md``, ``fig_test_bins.png``, ``matched_test.csv`` / ``.md`` and
``fig_matched_test.png``, none without ``probe.test``. Its part of ``summary.json``:
``{"test_difficulty": null}`` without ``probe.test``, else ``{"test_difficulty": {"bins",
"matched", "spread", "verdict", "edges", "k"}}``.
"""

from __future__ import annotations

from diffgrpo import probe
from diffgrpo.analysis import by_test_difficulty, figures
from diffgrpo.analysis.tables import DIGITS, markdown
from diffgrpo.store.artifacts import save_figure, write_csv, write_text

TABLES = ("test_bins", "matched_test")
FIGURES = ("fig_test_bins", "fig_matched_test")


def write(study) -> dict:
    cfg, out, scores = study.cfg, study.out, study.scores
    test_probe = probe.read_test_prompts(cfg)
    if test_probe is None:
        return {"test_difficulty": None}
    n_boot, seed, edges = cfg.analyze.bootstrap, cfg.analyze.seed, cfg.analyze.test_bins
    p_hat = by_test_difficulty.test_p_hat(test_probe, scores.prompts)
    bins = by_test_difficulty.by_bin(scores, p_hat, edges, n_boot, seed)
    write_csv(out / "test_bins.csv", bins.round(DIGITS))
    write_text(out / "test_bins.md", f"# Gain per test-difficulty bin (points, {cfg.analyze.metric}): the test prompts "
               f"binned by the base model's p_hat (K={cfg.probe.k}); 95% interval over the bin's test prompts and "
               "seeds\n\n" + markdown(bins.round(DIGITS)))
    save_figure(figures.plot_test_bins(bins), out / "fig_test_bins.png")
    ranges = by_test_difficulty.training_ranges(study.selections)
    table, dists = by_test_difficulty.matched(scores, p_hat, ranges, study.boot)
    sp = by_test_difficulty.spread(table, dists, study.pairs, study.control, seed, scores, study.boot)
    line = by_test_difficulty.verdict(sp)
    write_csv(out / "matched_test.csv", table.round(DIGITS))
    write_text(out / "matched_test.md", "# Each arm scored on the common test set and on the test prompts of its own "
               "training difficulty (p_hat within the range of its training prompts' p_hat), as 003's released code "
               f"scored its arms (points, {cfg.analyze.metric}; 95% intervals)\n\n" + markdown(table.round(DIGITS))
               + f"\n\n{line}\n")
    save_figure(figures.plot_matched_test(table), out / "fig_matched_test.png")
    return {"test_difficulty": {"bins": bins.round(DIGITS).to_dict("records"), "matched": table.round(DIGITS).to_dict(
        "records"), "spread": sp, "verdict": line, "edges": edges, "k": cfg.probe.k}}
