"""Rebuild the embedded default model (no hub): tokenizer, tiny Qwen2, pretraining, per-tier table.

    python scripts/build_embedded.py                       # the packaged checkpoint
    python scripts/build_embedded.py --out /tmp/emb --steps 100 --corpus-size 2000

Every BuildConfig field is a flag (``--tier-decay 0.7``); see diffgrpo/models/embedded.py for why
each exists. The folder gets build_info.json with the settings and the per-tier table.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields

import pandas as pd

from diffgrpo.models import embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(embedded.default_path()), help="output folder (default: the packaged one)")
    parser.add_argument("--quiet", action="store_true")
    defaults = embedded.BuildConfig()
    for f in fields(defaults):
        default = getattr(defaults, f.name)
        kind = json.loads if isinstance(default, dict) or "list" in str(f.type) else int if default is None else type(default)
        parser.add_argument("--" + f.name.replace("_", "-"), type=kind, default=None, help=f"default: {default!r}")
    args = vars(parser.parse_args())
    out, quiet = args.pop("out"), args.pop("quiet")
    overrides = {k: v for k, v in args.items() if v is not None}
    info = embedded.build(out, progress=not quiet, **overrides)
    print(pd.DataFrame(info["tiers"]).to_string(index=False))
    print(f"chosen step {info['chosen_step']}, {info['num_parameters']:,} parameters, built in {info['build_seconds']} s -> {out}")


if __name__ == "__main__":
    main()
