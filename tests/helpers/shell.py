"""The process-wide IPython ``InteractiveShell`` with the extension loaded for one test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell


@contextmanager
def magics_shell(
    kubeconfig: str | Path | None = None,
    *,
    extension: str = "trainjob_magics",
    **config: Any,
) -> Iterator[InteractiveShell]:
    """Load ``extension`` with ``TrainJobMagics`` settings; unload and forget them after.

    ``InteractiveShell.instance()`` is one object for the whole pytest process, so the
    extension is unloaded and the ``%config`` settings dropped even when the test fails.
    """
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", extension)
    try:
        if kubeconfig is not None:
            sh.run_line_magic("config", f"TrainJobMagics.kubeconfig = {str(kubeconfig)!r}")
        for key, value in config.items():
            sh.run_line_magic("config", f"TrainJobMagics.{key} = {value!r}")
        yield sh
    finally:
        sh.run_line_magic("unload_ext", extension)
        sh.config.pop("TrainJobMagics", None)  # %config persists in the shell's config
