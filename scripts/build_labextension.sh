#!/usr/bin/env bash
# Rebuild the lab extension after editing packages/labextension and put it where this venv's
# Jupyter finds it (pip install -e . copies the built files; skip-if-exists would keep old ones).
# build:prod is tsc, then JupyterLab 4.6's `jupyter-builder build` (Rspack; Node.js ^20.19 or
# >=22.12): docs/development.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
(cd packages/labextension && jlpm install --immutable >/dev/null && jlpm build:prod >/dev/null)
python -m pip install --quiet --disable-pip-version-check --no-deps -e .
