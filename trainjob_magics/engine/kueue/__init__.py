"""Kueue: queue labels, the admission wait, Workload status and the visibility API."""
