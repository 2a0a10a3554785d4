"""``%load_ext trainjob_magics`` entry points: register once, unload closes the sessions."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from . import restarts
from .magics import TrainJobMagics
from .views.frontend import has_kernel, ipywidgets_available

_NAME = "TrainJobMagics"


def loaded_magics(shell: Any) -> TrainJobMagics | None:
    """The ``TrainJobMagics`` instance registered in ``shell``, if any."""
    found = shell.magics_manager.registry.get(_NAME) if shell is not None else None
    return found if isinstance(found, TrainJobMagics) else None


def load_ipython_extension(shell: Any) -> None:
    """Register the magics and their configuration; loading twice is harmless."""
    if loaded_magics(shell) is not None:
        return
    shell.register_magics(TrainJobMagics(shell=shell))
    with contextlib.suppress(Exception):  # never in the way of loading
        restarts.mark_panels_of_the_kernel_before(shell)
    if has_kernel(shell) and not ipywidgets_available():
        print(MISSING_IPYWIDGETS.format(python=sys.executable))


# a notebook image without ipywidgets (a user's JupyterHub image): the magics work, with
# plain-text panels; one line says what is missing and what to install
MISSING_IPYWIDGETS = (
    "trainjob-magics: ipywidgets is not installed in this kernel's Python ({python}), so the "
    "panels are plain text; add it to the notebook image (pip install ipywidgets) for live "
    "panels (docs/jupyterhub.md#the-single-user-image)"
)


def unload_ipython_extension(shell: Any) -> None:
    """Close this kernel's sessions (deleting their TrainJobs) and remove the magics."""
    magics = loaded_magics(shell)
    if magics is None:
        return
    magics.unload()
    manager = shell.magics_manager
    for kind, names in magics.magics.items():
        table = manager.magics.get(kind, {})
        for name in names:
            table.pop(name, None)
    manager.registry.pop(_NAME, None)
    if magics in shell.configurables:
        shell.configurables.remove(magics)


def last_result(shell: Any = None) -> Any:
    """The result of the last ``%%trainjob`` cell in ``shell`` (default: the running one);
    None before the first."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    magics = loaded_magics(shell)
    return magics.host.last_result if magics is not None else None


__all__ = ["last_result", "load_ipython_extension", "loaded_magics", "unload_ipython_extension"]
