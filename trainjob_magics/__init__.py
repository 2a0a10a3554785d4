"""Interactive Kubeflow Trainer v2 TrainJobs from notebooks.

``import trainjob_magics`` does not import IPython: the magics load lazily through
``%load_ext trainjob_magics``.
"""

from __future__ import annotations

from typing import Any

from .engine import *  # noqa: F403  (the engine's public API, listed in engine.__all__)
from .engine import __all__ as _ENGINE_ALL


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (``%load_ext trainjob_magics``)."""
    from .magics import extension

    extension.load_ipython_extension(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Unregister the magics (``%unload_ext trainjob_magics``)."""
    from .magics import extension

    extension.unload_ipython_extension(ipython)


__all__ = [*_ENGINE_ALL, "load_ipython_extension", "unload_ipython_extension"]
