"""IPython layer: magics, per-kernel registry, widgets, text fallback and configuration."""

from .extension import load_ipython_extension, unload_ipython_extension
from .magics import (
    TrainJobCellError,
    TrainJobMagicError,
    TrainJobMagics,
    TrainJobUsageError,
    last_result,
)

__all__ = [
    "TrainJobCellError",
    "TrainJobMagicError",
    "TrainJobMagics",
    "TrainJobUsageError",
    "last_result",
    "load_ipython_extension",
    "unload_ipython_extension",
]
