"""A TrainJob's life: its body, runtime and trainer pod, waiting until it is ready, create and
delete, idle release, and orphans."""
