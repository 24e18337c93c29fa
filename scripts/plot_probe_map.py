"""The map of "when does the probe pay" (issue 46): docs/online_selection_map.png, drawn from the two
committed reports of the resolved study (docs/results/online_vs_offline_resolved*/summary.json) by
:func:`diffgrpo.analysis.figures.plot_sequential_map`. tests/test_committed_results.py draws it again
and compares the bytes.

    .venv/bin/python scripts/plot_probe_map.py            # writes docs/online_selection_map.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDIES = {"mixed pool (temperature 1)": "online_vs_offline_resolved",
           "skewed pool (temperature 0.3)": "online_vs_offline_resolved_skewed"}
OUT = ROOT / "docs" / "online_selection_map.png"


def draw(out: Path = OUT) -> Path:
    from diffgrpo.analysis.figures import plot_sequential_map
    from diffgrpo.store.artifacts import save_figure

    summaries = {t: json.loads((ROOT / "docs" / "results" / s / "summary.json").read_text()) for t, s in STUDIES.items()}
    save_figure(plot_sequential_map(summaries), out)
    return out


if __name__ == "__main__":
    print(draw(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
