"""Rank-side operations (run on the engines) and the pure planners the controller uses."""
