"""``mg.profile``: torch.profiler on every rank, collected into the notebook; its answers and timeline."""
