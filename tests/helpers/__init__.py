"""Helpers shared by the test modules: kernels, IPython shells, kubectl, API look-ups."""
