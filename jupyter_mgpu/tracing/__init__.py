"""``mg.trace`` and ``mg.show``: record what the ranks really do, and replay it."""
