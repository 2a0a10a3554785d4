"""``%load_ext trainjob_magics`` entry points: register once, unload closes the sessions."""

from __future__ import annotations

from typing import Any

from . import files_magics
from .magics import TrainJobMagics

_NAME = "TrainJobMagics"


def loaded_magics(shell: Any) -> TrainJobMagics | None:
    """The ``TrainJobMagics`` instance registered in ``shell``, if any."""
    found = shell.magics_manager.registry.get(_NAME)
    return found if isinstance(found, TrainJobMagics) else None


def load_ipython_extension(shell: Any) -> None:
    """Register the magics and their configuration; loading twice is harmless."""
    if loaded_magics(shell) is not None:
        return
    shell.register_magics(TrainJobMagics(shell=shell))
    files_magics.register(shell)


def unload_ipython_extension(shell: Any) -> None:
    """Close this kernel's sessions (deleting their TrainJobs) and remove the magics."""
    magics = loaded_magics(shell)
    if magics is None:
        return
    magics.unload()
    files_magics.unregister(shell)
    manager = shell.magics_manager
    for kind, names in magics.magics.items():
        table = manager.magics.get(kind, {})
        for name in names:
            table.pop(name, None)
    manager.registry.pop(_NAME, None)
    if magics in shell.configurables:
        shell.configurables.remove(magics)
