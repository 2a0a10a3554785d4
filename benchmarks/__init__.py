"""Benchmark suite for trainjob_magics: `python -m benchmarks [--smoke] [--only NAME]`."""
