"""Developer tools: run notebooks against the local cluster and print what they show."""
