"""``mg.collective`` and ``mg.bench``: collectives run for real on the ranks, seen and timed."""
