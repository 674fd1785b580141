"""Pure layout math (no torch, nothing of ours): where each piece of a global tensor lives, and its tiles."""
