#!/bin/sh
# The acceptance run on a GPU machine with no internet (docs/gpu.md, "The acceptance run"):
# installs the wheels that `make gpu-accept-wheels` put in .wheels-gpu/ into a folder of their
# own, then runs scripts/gpu_accept.py with them, offline (HF_HUB_OFFLINE=1: no internet there).
# Usage: sh scripts/gpu_accept.sh [accept.json]
set -e
cd "$(dirname "$0")/.."
OUT="${1:-accept.json}"
SITE="${TMPDIR:-/tmp}/diffgrpo-accept-site"
PY="${PYTHON:-python3}"
ls .wheels-gpu/*.whl >/dev/null 2>&1 || { echo "gpu-accept: no wheels in .wheels-gpu/: run make gpu-accept-wheels where pip reaches PyPI" >&2; exit 2; }
"$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .wheels-gpu/*.whl
HF_HUB_OFFLINE=1 PYTHONPATH="$PWD/lib:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 exec "$PY" scripts/gpu_accept.py --out "$OUT"
