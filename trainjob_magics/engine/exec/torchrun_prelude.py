"""The shell side of per-rank ``torchrun`` output: functions that add torchrun's own tagging.

A shell command whose text calls ``torchrun`` (or ``python -m torch.distributed.run``) runs
under a prelude (:func:`launcher_argv`, beside ``mpirun``'s of :mod:`.ranks` when the text calls
both) that defines the shell function ``torchrun`` (and ``python``/``python3`` when the text
names ``torch.distributed.run``). The user's text stays an argv element, ``eval``\\ ed as the
mpirun prelude does. The function runs the launcher with the user's arguments untouched, plus
``--tee 3 --log_dir DIR`` inserted before them (after ``python -m torch.distributed.run``),
only when

- its stdout and stderr are the exec's own (the fd test of :data:`.ranks.RANKS_SCRIPT`);
- the user chose no output form: none of ``--tee``/``-t``, ``--redirects``/``-r``,
  ``--log-dir``, ``--logs-specs``, ``--log-line-prefix-template`` (or a prefix argparse would
  take for one), nor ``PET_TEE``, ``PET_REDIRECTS``, ``PET_LOG_DIR`` (torchrun reads its options
  from ``PET_<NAME>``: torch/distributed/argparse_util.py), nor
  ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``; ``-h`` runs as written too;
- every option before the script is one torchrun has (torch 1.13 to 2.x run.py's
  ``get_args_parser``), so the script and its arguments are told apart from torchrun's.

``--tee 3`` makes torchrun's agent redirect each worker's stdout and stderr to files and tail
them to its own, each line written as ``[{role}{local_rank}]:`` + the line
(torch/distributed/elastic/multiprocessing/tail_log.py, ``TailLog.start`` and
``tail_logfile``; 1.13 and 2.6 alike). On torch >= 2.3 (its version read from the metadata of
the interpreter that runs torchrun: the script's ``#!`` line, or ``python``) the function also
sets ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` to ``\\x1e${rank}:${local_rank}\\x1f``: the agent
substitutes it per worker with ``string.Template`` (``role_name``, ``rank``, ``local_rank``:
torch/distributed/elastic/agent/server/local_elastic_agent.py, ``_start_workers``; read from the
environment by torch/distributed/run.py, ``config_from_args``) and the tail writes it instead
of ``[{role}{local_rank}]:``. ``--log_dir`` (the spelling every version takes) is a directory
made for the run and removed after it: torchrun's default, a new ``torchelastic_*`` directory,
would keep the tee's copy of the output in the pod after every cell.

Around the run it prints ``\\x1e TOKEN tbegin WORDS`` and ``tend N RC`` marker lines on both
streams: the words say the run's number, the prefix form, the role, the rendezvous facts that
give the global rank on older torch, the launcher and its torch version (:mod:`.torchrun_runs`
reads them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .ranks_prelude import CALLS_LAUNCHER, RANKS_SCRIPT
from .scripts import SHELLS

# Only a command whose text names one of these runs under the prelude (as for mpirun).
CALLS_TORCHRUN = re.compile(r"(?<![\w./-])torchrun(?![\w.-])")
CALLS_TORCH_RUN_MODULE = re.compile(r"(?<![\w.])torch\.distributed\.run(?![\w.])")

# The head and tail of every prelude (the mpirun prelude's own: one token, one run counter).
HEAD = "__Tt=$1 __Tc=$2;shift 2;__Tn=0\n"
TAIL = 'eval "$__Tc"\n'

# The prefix set on torch >= 2.3 (the shell's printf makes the two control characters).
TEMPLATE_PRINTF = r"'\036${rank}:${local_rank}\037'"

# torchrun(): __Tx LAUNCHER N ARGS, N: how many of ARGS come before torchrun's own (python's
# `-m torch.distributed.run`). Names as in RANKS_SCRIPT (POSIX sh: no `local`): __Tl launcher,
# __Tj N, __Th 'u' for untagged, __Tq role, __Tb rendezvous backend, __Tv nnodes, __Tg node
# rank, __Tp nproc per node, __Tf nproc given as an option, __Te torch version, __Tu prefix
# form, __Td log dir, __Ts host, __Tr exit code. __Tz stores an option's value, __T0 prints a
# word for the marker ('-' unless it is plain). __Td comes from `mktemp -d` (its XXXXXX is
# mktemp's template for random characters), empty when mktemp fails: no --log_dir then.
TORCHRUN_FUNCTIONS = (
    r"""torchrun(){ __Tx torchrun 0 "$@";}
__Tz(){ case $__Tw in o)__Tq=$1;;b)__Tb=$1;;v)__Tv=$1;;g)__Tg=$1;;p)__Tp=$1 __Tf=1;;esac;__Tw=;}
__T0(){ case $1 in *[!A-Za-z0-9._:+-]*|'')printf -;;*)printf %s "$1";;esac;}
__Tx(){
__Tl=$1 __Tj=$2;shift 2;__Th=;__To=/proc/$PPID/fd
[ /proc/self/fd/1 -ef $__To/1 ]&&[ /proc/self/fd/2 -ef $__To/2 ]||__Th=u
[ -z "${PET_TEE+1}${PET_REDIRECTS+1}${PET_LOG_DIR+1}" ]||__Th=u
[ -z "${TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE+1}" ]||__Th=u
__Tq=${PET_ROLE:-default} __Tb=${PET_RDZV_BACKEND:-static} __Tv=${PET_NNODES:-1:1}
__Tg=${PET_NODE_RANK:-0} __Tp=${PET_NPROC_PER_NODE:-1} __Tf=0 __Ti=0 __Tw=
[ "${PET_STANDALONE:-0}" = 0 ]||__Tb=c10d
for __Ta;do __Ti=$((__Ti+1));[ $__Ti -gt $__Tj ]||continue
[ -n "$__Tw" ]&&{ __Tz "$__Ta";continue;};__Tk=${__Ta%%=*}
case $__Tk in -h|--h*|-t*|--t*|-r*|--re*|--log*)__Th=u;break;;--role)__Tw=o;;
--rdzv[-_]backend)__Tw=b;;--nnodes)__Tw=v;;--node[-_]rank)__Tw=g;;--nproc[-_]per[-_]node)__Tw=p;;
--standalone)__Tb=c10d;;-m|--mod*|--no[-_]*|--run*);;
--rdzv[-_]*|--ma[sx]*|--mon*|--sta*|--si*|--local[-_]*|--ev*|--nu*)__Tw=1;;-*)__Th=u;break;;*)break;;esac
[ "$__Tk" = "$__Ta" ]||__Tz "${__Ta#*=}"
done
if [ -z "$__Th" ];then
if [ $__Tl = python ]||[ $__Tl = python3 ];then __Ta=$__Tl
elif __Ta=$(unset -f torchrun;command -v torchrun);then IFS= read -r __Ta <"$__Ta"||__Ta=
case $__Ta in '#!'*python*)__Ta=${__Ta#??};;*)__Ta=;;esac;else __Th=u __Ta=;fi
__Te=;[ -n "$__Ta" ]&&__Te=$(command $__Ta -c \
'import importlib.metadata as m;print(m.version("torch"))' 2>/dev/null)
case $__Te in [3-9].*|[1-9][0-9]*.*|2.[3-9]*|2.[1-9][0-9]*)__Tu=template;;*)__Tu=default
case $__Tq in *[!A-Za-z0-9._-]*|'')__Th=u;;esac;;esac
fi
[ -z "$__Th" ]||{ command $__Tl "$@";return;}
__Td=$(mktemp -d "${TMPDIR:-/tmp}/trainjob-torchrun.XXXXXX" 2>/dev/null)||__Td=
__Ti=0 __Tk=$#
while :;do [ $__Ti = $__Tj ]&&{ set -- "$@" --tee 3;[ -z "$__Td" ]||set -- "$@" --log_dir "$__Td";}
[ $__Ti = $__Tk ]&&break;__Ti=$((__Ti+1));__Ta=$1;shift;set -- "$@" "$__Ta";done
__Tn=$((__Tn+1));__Ts=$(hostname 2>/dev/null||uname -n)
__Tb="$__Tn $__Tu $__Tq $(__T0 "$__Tb") $(__T0 "$__Tv") $(__T0 "$__Tg") $(__T0 "$__Tp") \
$(__T0 "${PET_NPROC_PER_NODE:-}") $__Tf $__Tl $(__T0 "$__Te") $(__T0 "$__Ts")"
printf '\036%s tbegin %s\n' $__Tt "$__Tb";printf '\036%s tbegin %s\n' $__Tt "$__Tb" >&2
if [ $__Tu = template ];then
if TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=$(printf """
    + TEMPLATE_PRINTF
    + r""") command $__Tl "$@";then __Tr=0;else __Tr=$?;fi
elif command $__Tl "$@";then __Tr=0;else __Tr=$?;fi
printf '\036%s tend %s %s\n' $__Tt $__Tn $__Tr;printf '\036%s tend %s %s\n' $__Tt $__Tn $__Tr >&2
[ -z "$__Td" ]||rm -rf "$__Td"
return $__Tr
}
"""
)

# python()/python3(): torchrun's function when the arguments run `-m torch.distributed.run`
# (after python's own options), else python as written.
PYTHON_FUNCTIONS = r"""python(){ __Ty python "$@";}
python3(){ __Ty python3 "$@";}
__Ty(){
__Tl=$1;shift;__Tj=0 __Tw=
for __Ta;do __Tj=$((__Tj+1))
if [ -n "$__Tw" ];then [ $__Tw = m ]||{ __Tw=;continue;}
[ "$__Ta" = torch.distributed.run ]&&{ __Tx $__Tl $__Tj "$@";return;};break;fi
case $__Ta in -m)__Tw=m;;-[WX])__Tw=1;;-c*|-|--*|[!-]*)break;;esac
done
command $__Tl "$@"
}
"""


def calls_torchrun(text: str) -> bool:
    """The shell text calls ``torchrun`` or ``python -m torch.distributed.run``."""
    return any(r.search(text) is not None for r in (CALLS_TORCHRUN, CALLS_TORCH_RUN_MODULE))


def prelude(text: str, mpi: bool = True) -> str:
    """The prelude for the shell text: mpirun's functions when it calls mpirun/mpiexec (and
    ``mpi``), torchrun's when it calls torchrun (python's when it names
    ``torch.distributed.run``)."""
    torch = ""
    if calls_torchrun(text):
        torch = TORCHRUN_FUNCTIONS
        if CALLS_TORCH_RUN_MODULE.search(text):
            torch += PYTHON_FUNCTIONS
    if not mpi or CALLS_LAUNCHER.search(text) is None:
        return HEAD + torch + TAIL
    return RANKS_SCRIPT[: -len(TAIL)] + torch + TAIL


def wants_launchers(argv: Sequence[str]) -> bool:
    """``[sh, -c, TEXT]`` (any shell) whose text calls ``mpirun``/``mpiexec`` or torchrun."""
    return (
        len(argv) == 3
        and argv[0].rsplit("/", 1)[-1] in SHELLS
        and argv[1] == "-c"
        and (CALLS_LAUNCHER.search(argv[2]) is not None or calls_torchrun(argv[2]))
    )


def wants_torchrun(argv: Sequence[str]) -> bool:
    """``[sh, -c, TEXT]`` (any shell) whose text calls torchrun: what a command on several pods
    gets the prelude for (mpirun's runs there as written)."""
    return (
        len(argv) == 3
        and argv[0].rsplit("/", 1)[-1] in SHELLS
        and argv[1] == "-c"
        and calls_torchrun(argv[2])
    )


def launcher_argv(argv: Sequence[str], token: str, mpi: bool = True) -> list[str]:
    """``[sh, -c, TEXT]`` -> ``[sh, -c, PRELUDE, sh, TOKEN, TEXT]`` (``$0`` stays the shell's
    name, as ``sh -c TEXT`` has it); ``mpi=False``: torchrun's functions only."""
    shell = argv[0]
    return [shell, "-c", prelude(argv[2], mpi), shell.rsplit("/", 1)[-1], token, argv[2]]


if not (RANKS_SCRIPT.startswith(HEAD) and RANKS_SCRIPT.endswith(TAIL)):  # pragma: no cover
    raise ImportError(
        "exec/ranks_prelude.py's RANKS_SCRIPT no longer starts and ends as HEAD and TAIL"
    )

__all__ = ["calls_torchrun", "launcher_argv", "prelude", "wants_launchers", "wants_torchrun"]
