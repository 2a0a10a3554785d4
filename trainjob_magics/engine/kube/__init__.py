"""Talking to the API server: requests and Status mapping, retries, kubeconfig, watches, names."""
