"""Running what the notebook sends: cells and shipped functions (``calls``, ``shipped_function``), the direct channel
and the completion server, the rank's namespace, cell values, and tracebacks that lead to the user's line."""
