"""Files and logs: tar-stream upload/download with a safe unpack and sha256 check, and pod logs."""
