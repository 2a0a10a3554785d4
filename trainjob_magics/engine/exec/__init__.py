"""pods/exec: the WebSocket client, bounded output, the remote sh scripts, stoppable commands
with the in-flight registry, and runs on many pods."""
