"""The shell side of per-rank ``mpirun``/``mpiexec`` output: the prelude that adds the
launcher's own tagging, and the argv that runs a command under it.

A shell command whose text calls ``mpirun`` or ``mpiexec`` runs under :data:`RANKS_SCRIPT`
(:func:`ranked_argv`): a POSIX ``sh`` prelude that defines the shell functions ``mpirun`` and
``mpiexec``, then ``eval``s the command (the user's text is an argv element, never spliced into
ours). Each function runs ``command mpirun "$@"``, the user's arguments untouched, and adds the
launcher's own tagging option only when

- its stdout and stderr are the exec's own (not redirected, piped or captured by the user:
  ``/proc/self/fd/N`` is the file of the wrapper's, ``$PPID``), and
- none of the user's arguments chooses an output form already (Open MPI ``--tag-output``,
  ``--timestamp-output``, ``--output``, ``--output-filename``, ``--xml``,
  ``--merge-stderr-to-stdout``...; Hydra ``-prepend-rank``, ``-l``, ``-prepend-pattern``,
  ``-outfile-pattern``...), and
- ``command mpirun --version`` names a launcher whose tags carry the rank:

  ============  =======================================  =====================================
  launcher      option added                             each line's tag
  ============  =======================================  =====================================
  Open MPI 4    ``--tag-output`` (+ ``--display-map``)   ``[1,3]<stdout>:`` (host: the map)
  Open MPI 5    ``--output tag-detailed``                ``[1,3][host:pid]<stdout>: ``
  MPICH Hydra   ``-prepend-pattern \\x1e%r@%h\\x1f``       ``\\x1e3@host\\x1f``
  ============  =======================================  =====================================

Around the run it prints a marker line on both streams (``\\x1e`` + a token new for each
command + ``begin``/``end``), which :mod:`.ranks_demux` reads.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence

from .scripts import SHELLS

# Only a command whose text names one of these runs under the prelude: the functions could not
# be called otherwise, and every other command runs exactly as before (no eval).
CALLS_LAUNCHER = re.compile(r"(?<![\w./-])(mpirun|mpiexec)(?![\w.-])")

# The prelude. $1: the marker token, $2: the command. Every name it defines starts with __T
# (POSIX sh has no `local`). What it prints in markers is its own words, digits, or hostfile
# names that passed a character check. It is one argv element of every exec URL that runs
# mpirun: kept short (the local cluster's API server takes request lines up to 8 KiB).
# The fd test takes no 2>/dev/null: that would make fd 2 another file while it looks at it.
RANKS_SCRIPT = r"""__Tt=$1 __Tc=$2;shift 2;__Tn=0
mpirun(){ __Tm mpirun "$@";}
mpiexec(){ __Tm mpiexec "$@";}
__Tm(){
__Tl=$1;shift;__Th=;__Tp=1;__To=/proc/$PPID/fd
[ /proc/self/fd/1 -ef $__To/1 ]&&[ /proc/self/fd/2 -ef $__To/2 ]||__Th=u
for __Ta;do case $__Ta in -*tag-output|-*timestamp-output|-*output-filename*|-*xml*|\
-*merge-stderr*|-*output|-*output=*|-*xterm|-*prepend-*|-l|-*file-pattern|-V|-*version|-h|\
-*help|-info)__Th=u;;
-*display-map|-*display-devel-map)__Tp=0;;esac;done
[ -z "$__Th" ]&&case $(command $__Tl --version 2>&1) in
*"MPI) "[34].*|*"RTE) "[34].*)__Th=openmpi4;;
*"MPI) 5."*|*"MPI) 6."*|*"(PRRTE)"*)__Th=openmpi5;;*"HYDRA build details"*)__Th=hydra;;esac
case $__Th in o*|h*);;*)command $__Tl "$@";return;;esac
__Tv=-;__Tf=0;__Tw=
for __Ta;do
if [ -n "$__Tw" ];then [ $__Tw = n ]&&__Tv=$__Ta;[ $__Tw = 2 ]&&__Tw=1||__Tw=;continue;fi
case $__Ta in -np|--np|-n|--n|-c)__Tw=n;;-np=*|--np=*|-n=*|--n=*)__Tv=${__Ta#*=};;
-*hostfile|-*machinefile|-f|-H|-*host|-hosts)__Tf=1;__Tw=1;;-*hostfile=*|-*host=*)__Tf=1;;
-*mca|-*env)__Tw=2;;-x|-N|-*npernode|-*ppn|-*-by|-*bind-to|-*wdir|-wd|-*prefix|-*timeout|\
-*stdin|-launcher|-bootstrap|-iface)__Tw=1;;--|[!-]*)break;;esac
done
case $__Tv in *[!0-9]*|'')__Tv=-;;esac
__Tk=${PRTE_MCA_prte_default_hostfile:-${OMPI_MCA_prte_default_hostfile:-}}
__Tk=${__Tk:-${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}}
[ -r "$__Tk" ]||__Tk=${TRAINJOB_LOCAL_HOSTFILE:-$__Tk}
__Ts=
[ -r "$__Tk" ]&&while read -r __Ta __Tr||[ -n "$__Ta" ];do __Tg=1
case $__Ta in *:*)__Tg=${__Ta#*:};__Ta=${__Ta%%:*};;esac
case $__Tr in *slots=*)__Tg=${__Tr#*slots=};__Tg=${__Tg%%[!0-9]*};;esac
case $__Ta$__Tg in *[!A-Za-z0-9._-]*|[!A-Za-z0-9]*);;*)__Ts="$__Ts $__Ta=${__Tg:-1}";;esac
done<"$__Tk"
__Te=-;[ -n "${OMPI_MCA_orte_default_hostfile:-}" ]&&__Te=orte
[ -n "${PRTE_MCA_prte_default_hostfile:-}${OMPI_MCA_prte_default_hostfile:-}" ]&&__Te=${__Te#-}prte
__Tn=$((__Tn+1))
case $__Th in openmpi4)[ $__Tp = 1 ]&&set -- --display-map "$@";set -- --tag-output "$@";;
openmpi5)__Tp=0;set -- --output tag-detailed "$@";;
*)__Tp=0;set -- -prepend-pattern "$(printf '\036%%r@%%h\037')" "$@";;esac
__Tb="$__Tn $__Th $__Tp $__Tv $__Tf $__Te $__Tl$__Ts"
printf '\036%s begin %s\n' $__Tt "$__Tb";printf '\036%s begin %s\n' $__Tt "$__Tb" >&2
if command $__Tl "$@";then __Tr=0;else __Tr=$?;fi
printf '\036%s end %s %s\n' $__Tt $__Tn $__Tr;printf '\036%s end %s %s\n' $__Tt $__Tn $__Tr >&2
return $__Tr
}
eval "$__Tc"
"""


def new_token() -> str:
    """A fresh marker token: output cannot hold it by chance."""
    return "tjm" + secrets.token_hex(8)


def wants_ranks(argv: Sequence[str]) -> bool:
    """``[sh, -c, TEXT]`` (any shell) whose text calls ``mpirun``/``mpiexec``."""
    return (
        len(argv) == 3
        and argv[0].rsplit("/", 1)[-1] in SHELLS
        and argv[1] == "-c"
        and CALLS_LAUNCHER.search(argv[2]) is not None
    )


def ranked_argv(argv: Sequence[str], token: str) -> list[str]:
    """``[sh, -c, TEXT]`` -> ``[sh, -c, RANKS_SCRIPT, sh, TOKEN, TEXT]`` (``$0`` stays the
    shell's name, as ``sh -c TEXT`` has it)."""
    shell = argv[0]
    return [shell, "-c", RANKS_SCRIPT, shell.rsplit("/", 1)[-1], token, argv[2]]


__all__ = ["CALLS_LAUNCHER", "RANKS_SCRIPT", "new_token", "ranked_argv", "wants_ranks"]
