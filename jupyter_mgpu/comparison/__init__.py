"""``mg.compare``: one model under several training strategies, measured side by side; its result and pipeline schedule."""
