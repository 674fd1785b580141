"""Notebook widgets and static renderings (memory dashboard, collective view, benchmark plots, players)."""
