"""One host's cluster: the controller, the supervisor that forks the engines, start and stop."""
