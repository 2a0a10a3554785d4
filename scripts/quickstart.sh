#!/usr/bin/env bash
# Quick start from a fresh clone: install what is needed (into the project's venv,
# scripts/venv.sh), start the local cluster, execute notebooks/quickstart.ipynb against it and
# print each cell's output.
# The executed notebook (with widget state) is saved to artifacts/quickstart.executed.ipynb.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
bash scripts/setup.sh
exec python devtools/notebook_run.py notebooks/quickstart.ipynb \
  --output artifacts/quickstart.executed.ipynb "$@"
