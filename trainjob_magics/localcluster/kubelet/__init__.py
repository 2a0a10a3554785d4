"""The kubelet of the local cluster: each pod's processes (its own working directory,
environment and process groups), the server side of pods/exec (WebSocket) and pods/log,
containerStatuses pieces, and the shims put first on every pod's PATH (``hostname``, and
``mpirun``/``mpiexec``, launchers of :mod:`.mpirun`: the real Open MPI with
:mod:`.rsh_agent` and ``fork_agent.sh`` when installed, else :mod:`.mpirun_imitation`).

Imports only ``core/`` from the rest of the local cluster.
"""

from .exec_ws import handle_exec
from .pod_logs import read_log
from .processes import PodSandbox, make_sandbox, run_container

__all__ = ["PodSandbox", "handle_exec", "make_sandbox", "read_log", "run_container"]
