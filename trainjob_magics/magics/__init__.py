"""IPython layer: magics, per-kernel registry, widgets, text fallback and configuration.

``StatusWidget`` is public for notebooks that show a status kept current from ``on_status`` (a
static panel updated through its display id, which survives a notebook saved without widgets).
"""

from .extension import last_result, load_ipython_extension, unload_ipython_extension
from .failures import TrainJobCellError, TrainJobMagicError, TrainJobUsageError
from .magics import TrainJobMagics
from .views.status import StatusWidget

__all__ = [
    "StatusWidget",
    "TrainJobCellError",
    "TrainJobMagicError",
    "TrainJobMagics",
    "TrainJobUsageError",
    "last_result",
    "load_ipython_extension",
    "unload_ipython_extension",
]
