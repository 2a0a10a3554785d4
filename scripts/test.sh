#!/usr/bin/env bash
# The whole test suite: lint, format check, unit, integration, notebook and browser tests, in the
# project's venv (scripts/venv.sh). Skips are listed at the end with their reasons (-rs, grouped).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
bash scripts/setup.sh --browser
ruff check .
ruff format --check .
# types of the engine and the magics ([tool.mypy] in pyproject.toml)
mypy
# the lab extension (packages/labextension): strict types, eslint, its jest tests
(cd packages/labextension && jlpm install --immutable >/dev/null && jlpm typecheck && jlpm lint \
  && jlpm test --silent)
# Debian's python3-torch (the real torchrun of the per-rank tests), under .ci/run's
# TRAINJOB_MAGICS_REQUIRE_TORCH=1 when missing: 164 packages, 83-143 s cold, so in the background;
# the tests that need it wait for it (tests/helpers/torch.py).
if [ "${TRAINJOB_MAGICS_REQUIRE_TORCH:-}" = 1 ] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null
then
  mkdir -p artifacts
  export TRAINJOB_MAGICS_TORCH_PENDING="$PWD/artifacts/torch-install.rc"
  rm -f "$TRAINJOB_MAGICS_TORCH_PENDING"
  echo "installing python3-torch in the background (output in artifacts/torch-install.log)"
  (rc=0; { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends python3-torch; } >artifacts/torch-install.log 2>&1 || rc=$?
    echo "$rc" >"$TRAINJOB_MAGICS_TORCH_PENDING") &
fi
# The real stack (docs/real-cluster.md): upstream Kubernetes, JobSet, Trainer and Kueue, built
# from their Go modules (the first time about 25 minutes on 2 cores, then cached) and started for
# the suite in artifacts/realstack. It starts in the background: the tests that need it run last
# and wait for it (tests/helpers/realstack_pending.py), everything else runs while it builds.
# Without Go (or with TRAINJOB_MAGICS_REALSTACK=0) the tests that need it skip and say so;
# .ci/run sets TRAINJOB_MAGICS_REQUIRE_REALSTACK=1: then a stack that cannot be built or started
# fails them, with the end of its output.
if [ "${TRAINJOB_MAGICS_REALSTACK:-1}" != 0 ] \
   && { command -v go >/dev/null 2>&1 || [ "${TRAINJOB_MAGICS_REQUIRE_REALSTACK:-}" = 1 ]; }; then
  export TRAINJOB_MAGICS_REALSTACK_DIR="${TRAINJOB_MAGICS_REALSTACK_DIR:-$PWD/artifacts/realstack}"
  mkdir -p artifacts
  export TRAINJOB_MAGICS_REALSTACK_PENDING="$PWD/artifacts/realstack-up.rc"
  rm -f "$TRAINJOB_MAGICS_REALSTACK_PENDING"
  echo "starting the real stack in the background (python -m devtools.realstack up --jupyterhub;" \
    "output in artifacts/realstack-up.log; the first build takes a while)"
  # a process group of its own, so an interrupted run stops the whole start (its Go builds too)
  # before it takes down what the start made
  setsid bash -c 'rc=0; python -m devtools.realstack up --jupyterhub >artifacts/realstack-up.log 2>&1 || rc=$?
    echo "$rc" >"$TRAINJOB_MAGICS_REALSTACK_PENDING"' &
  up_pid=$!
  # (|| true: under set -e a failing command in the trap, such as kill after the start ended,
  # would replace pytest's exit code)
  trap 'kill -- -"$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true;
        python -m devtools.realstack down >/dev/null 2>&1 || true' EXIT
fi
# --durations=40: the slowest tests, for the time budget (docs/testing.md)
python -m pytest -p no:cacheprovider -rs --durations=40 "$@"
