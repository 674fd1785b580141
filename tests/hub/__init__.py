"""Tests against a real JupyterHub. A package so that its one hub (the package-scoped ``hub`` fixture) is
torn down after the last hub test, not kept running through the rest of the suite."""
