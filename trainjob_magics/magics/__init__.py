"""IPython layer: magics, per-kernel registry, widgets, text fallback and configuration."""

from .cell import last_result
from .errors import TrainJobCellError, TrainJobMagicError, TrainJobUsageError
from .extension import load_ipython_extension, unload_ipython_extension
from .magics import TrainJobMagics

__all__ = [
    "TrainJobCellError",
    "TrainJobMagicError",
    "TrainJobMagics",
    "TrainJobUsageError",
    "last_result",
    "load_ipython_extension",
    "unload_ipython_extension",
]
