#!/usr/bin/env bash
# The whole test suite: lint, format check, unit, integration, notebook and browser tests, in the
# project's venv (scripts/venv.sh). Skips are listed at the end with their reasons (-rs, grouped).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
bash scripts/setup.sh --browser
ruff check .
ruff format --check .
# the lab extension (packages/labextension): strict types, eslint, its jest tests
(cd packages/labextension && jlpm install --immutable >/dev/null && jlpm typecheck && jlpm lint \
  && jlpm test --silent)
# The real stack (docs/real-cluster.md): upstream Kubernetes, JobSet, Trainer and Kueue, built
# from their Go modules (the first time about 20 minutes on 2 cores, then cached) and started for
# the suite in artifacts/realstack. Without Go (or with TRAINJOB_MAGICS_REALSTACK=0) the tests
# that need it skip and say so; .ci/run sets TRAINJOB_MAGICS_REQUIRE_REALSTACK=1: then a stack
# that cannot be built or started fails the run.
if [ "${TRAINJOB_MAGICS_REALSTACK:-1}" != 0 ] \
   && { command -v go >/dev/null 2>&1 || [ "${TRAINJOB_MAGICS_REQUIRE_REALSTACK:-}" = 1 ]; }; then
  export TRAINJOB_MAGICS_REALSTACK_DIR="${TRAINJOB_MAGICS_REALSTACK_DIR:-$PWD/artifacts/realstack}"
  trap 'python -m devtools.realstack down >/dev/null 2>&1 || true' EXIT
  echo "starting the real stack (python -m devtools.realstack up; the first build takes a while)"
  if ! python -m devtools.realstack up; then
    if [ "${TRAINJOB_MAGICS_REQUIRE_REALSTACK:-}" = 1 ]; then
      exit 1
    fi
    echo "the real stack did not start: its tests will skip (see the line above)" >&2
  fi
fi
python -m pytest -p no:cacheprovider -rs "$@"
