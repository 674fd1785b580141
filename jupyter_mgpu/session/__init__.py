"""Drive the ranks of one cluster from the notebook: Session, init/current/shutdown, errors, output, recovery."""
