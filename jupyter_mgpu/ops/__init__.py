"""Rank-side operations (run on the engines through ``Session.run``) and their pure planners."""
