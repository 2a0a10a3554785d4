#!/bin/sh
# Open MPI's fork agent in the local cluster (OMPI_MCA_orte_fork_agent, set by kubelet/mpirun.py):
# orted runs `sh fork_agent.sh <rank's command>` after it has set the rank's environment and
# changed to its working directory, which is mpirun's (Open MPI keeps the cwd on every node).
# On a real cluster that path names a directory in the rank's own pod; here every pod has a
# directory of its own under $TRAINJOB_LOCAL_ROOT/namespaces/<ns>/pods/, so a cwd inside another
# pod's directory is mapped to the same place in this pod's directory ($HOME), or to $HOME itself
# when that does not exist (Open MPI's own fallback for a missing cwd). Then it execs the rank.
root=${TRAINJOB_LOCAL_ROOT:-}
cwd=$(pwd -P 2>/dev/null) || cwd=
if [ -n "$root" ] && [ -n "${HOME:-}" ] && [ -n "$cwd" ]; then
    case $cwd in
        "$HOME" | "$HOME"/*) ;;
        "$root"/namespaces/*/pods/*)
            rest=${cwd#"$root"/namespaces/*/pods/}
            case $rest in */*) rel=${rest#*/} ;; *) rel= ;; esac
            if [ -n "$rel" ] && [ -d "$HOME/$rel" ]; then
                cd "$HOME/$rel" || exit 1
            else
                cd "$HOME" || exit 1
            fi ;;
    esac
fi
exec "$@"
