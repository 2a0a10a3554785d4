"""An Open MPI 5 runtime on the real stack, so kubeflow/trainer#4028 shows on this machine.

Trainer's MPI plugin (``pkg/runtime/framework/plugins/mpi/mpi.go``, v2.1-v2.3) configures Open
MPI on the launcher's ``node`` container with ORTE-era variables only (``OMPI_MCA_orte_*``,
``OMPI_MCA_plm_rsh_args``). Open MPI 5 runs ``mpirun`` through PRRTE, which reads ``PRTE_MCA_*``:
its ``mpirun`` sets ``PRTE_MCA_schizo_proxy=ompi`` before it execs ``prterun``, and with that
variable PRRTE's ``schizo/ompi`` never translates ``OMPI_MCA_orte_*`` (its ``translate_params``
runs only for ``--personality ompi``). The hostfile is never read, every rank starts on the
launcher, and the TrainJob still ends Complete.

``RUNTIME`` is Trainer's own ``deepspeed-distributed`` (the runtime the stack applied, from the
Trainer module's ``manifests/overlays/runtimes``) with every image replaced by
``images.OPENMPI5_IMAGE``: Debian trixie's Open MPI 5.0 with the mpi-operator layout of the
``mpi`` recipe (``mpiuser`` uid 1000, sshd on 2222 from ``~/.sshd_config``).

``python -m devtools.realstack openmpi5`` builds the image (cached; the first time one
mmdebstrap of trixie), imports it into the running stack's containerd and applies the runtime
as a ClusterTrainingRuntime; tests/realstack/test_openmpi5.py does the same with a namespaced
TrainingRuntime of its own.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from devtools.realstack import controllers, gobuild, images, manifests
from devtools.realstack.context import StackContext
from devtools.realstack.procs import StackError
from devtools.realstack.realnode import containerd

RUNTIME = "deepspeed-openmpi5"
SOURCE_RUNTIME = "deepspeed-distributed"
LABEL = "trainjob-magics.local/openmpi"

# What Open MPI 5 needs on top of Trainer's variables, as PRRTE names -> the Trainer variable
# whose value they take (measured on this stack, tests/realstack/test_openmpi5.py; the names are
# PRRTE 3.0's, as `prte_info --all` lists them in the image):
# - prte_default_hostfile alone spreads the ranks over the pods (Trainer's hostfile gives every
#   host `slots=numProcPerNode`, so prte_set_default_slots changes nothing);
# - plm_ssh_args keeps Trainer's `-o ConnectionAttempts=10` (ssh retries a pod whose name does
#   not resolve yet);
# - prte_keep_fqdn_hostnames must stay unset (false): with Trainer's `true` PRRTE does not see
#   the launcher's own hostfile entry (`<pod>.<subdomain>`) as itself and ssh's to it, refused
#   on port 2222 ("PRTE has lost communication with a remote daemon").
# Open MPI 4.1 ignores all PRTE_MCA_* (ORTE reads OMPI_MCA_* only): harmless there.
PRTE_EQUIVALENTS = {
    "PRTE_MCA_prte_default_hostfile": "OMPI_MCA_orte_default_hostfile",
    "PRTE_MCA_plm_ssh_args": "OMPI_MCA_plm_rsh_args",
}
# the same as a shell preamble (quoted: the ssh arguments hold a space)
PREAMBLE = "; ".join(f'export {prte}="${trainer}"' for prte, trainer in PRTE_EQUIVALENTS.items())


def log_path(ctx: StackContext) -> Path:
    return ctx.run / "logs" / "openmpi5.log"


def import_image(ctx: StackContext) -> Path:
    """Build (or take from the cache) the Open MPI 5 image and import it into the running
    stack's containerd (nothing is imported when containerd has it at that digest)."""
    log = log_path(ctx)
    tar = images.build_openmpi5(log)
    bins = gobuild.build("containerd", ctx.versions.containerd, ctx.run / "logs" / "build.log")
    images.import_images(bins / "ctr", containerd.socket(ctx), [tar], log)
    return tar


def _images(obj: Any, image: str) -> int:
    """Point every container (and init container) of ``obj`` at ``image``; how many."""
    n = 0
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for c in value:
                    if isinstance(c, dict) and "image" in c:
                        c["image"] = image
                        c["imagePullPolicy"] = "IfNotPresent"
                        n += 1
            n += _images(value, image)
    elif isinstance(obj, list):
        for item in obj:
            n += _images(item, image)
    return n


def source_runtime(ctx: StackContext) -> dict:
    """Trainer's ``deepspeed-distributed`` as the stack applied it."""
    version = ctx.versions.trainer
    root = controllers.module_dir(ctx, "trainer", version) / "manifests"
    folder = root / "overlays" / "runtimes"
    built = manifests.build(folder if folder.is_dir() else root / "base" / "runtimes")
    found = built.get("ClusterTrainingRuntime", SOURCE_RUNTIME)
    if found is None:
        raise StackError(f"Trainer {version} ships no ClusterTrainingRuntime {SOURCE_RUNTIME}")
    return manifests.clean(found)


def runtime_object(ctx: StackContext, namespace: str | None = None, name: str = RUNTIME) -> dict:
    """``deepspeed-distributed`` on the Open MPI 5 image: a ClusterTrainingRuntime, or with
    ``namespace`` a TrainingRuntime there."""
    rt = copy.deepcopy(source_runtime(ctx))
    if _images(rt["spec"], images.OPENMPI5_IMAGE) == 0:
        raise StackError(f"{SOURCE_RUNTIME} of Trainer {ctx.versions.trainer} names no image")
    meta = rt["metadata"]
    keep = {k: v for k, v in meta.items() if k in ("labels", "annotations")}
    rt["metadata"] = {**keep, "name": name}
    rt["metadata"].setdefault("labels", {})[LABEL] = "5"
    if namespace is not None:
        rt["kind"] = "TrainingRuntime"
        rt["metadata"]["namespace"] = namespace
    return rt


def add(ctx: StackContext) -> dict:
    """The image in containerd and ClusterTrainingRuntime ``RUNTIME`` applied: what was done."""
    tar = import_image(ctx)
    controllers.apply(ctx, [runtime_object(ctx)], "openmpi5-runtime")
    return {
        "runtime": RUNTIME,
        "image": images.OPENMPI5_IMAGE,
        "oci_tar": str(tar),
        "trixie_base_mmdebstrap_s": images.base_build_seconds(images.OPENMPI5_SUITE),
        "prte_equivalents": PRTE_EQUIVALENTS,
        "preamble": PREAMBLE,
    }
