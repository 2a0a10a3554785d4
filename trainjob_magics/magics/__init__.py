"""IPython layer: magics, per-kernel registry, widgets, text fallback and configuration.

``StatusWidget`` is public for notebooks that show a live status from ``on_status``.
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
