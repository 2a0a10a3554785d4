# Sourced by setup.sh, test.sh and quickstart.sh (from the repository root): run in a venv,
# never in the system's Python. An active venv is used as it is; otherwise the project's own,
# .venv in the repository, is created on first use and put first on PATH, so `python`, `ruff`,
# `jupyter`, `ipython`, `trainjob-magics` and the tests' subprocesses (sys.executable, the
# python3 kernelspec) are the venv's.
if [ -z "${VIRTUAL_ENV:-}" ] \
   && ! python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then
  if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    # none yet, or one left half-made by an interrupted run
    if ! python3 -m venv --clear .venv; then
      echo "scripts/venv.sh: 'python3 -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
  export VIRTUAL_ENV="$PWD/.venv"
  export PATH="$VIRTUAL_ENV/bin:$PATH"
  unset PYTHONHOME
fi
