"""Readers in the kernel of what the ranks publish out of band: live memory and logged metrics."""
