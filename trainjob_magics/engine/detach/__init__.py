"""Detached runs: commands that belong to the TrainJob, not to the kernel (``session.detach``)."""
