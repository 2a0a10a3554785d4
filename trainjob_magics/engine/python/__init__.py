"""Persistent Python interpreters in the pods (``%%trainjob --python``, push, pull)."""
