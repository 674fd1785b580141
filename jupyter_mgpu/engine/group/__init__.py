"""The rank's torch.distributed process group: the session's own (``process_group``, ``tcp_rendezvous``), the
environment torchrun would give (``torchrun_env``), and the user's ``init_process_group`` checked as torch checks it."""
