"""Parallel training strategies run with torch's own APIs on the ranks, measured side by side.

``mg.compare`` (controller, ``jupyter_mgpu/comparison/compare_run.py``) plans a comparison with the pure modules
here (``model_spec``, ``plan``, ``expected``: no torch) and runs one strategy at a time on the ranks
through ``compare_run.run``, which builds the model split of ``single``, ``ddp`` (DistributedDataParallel),
``fsdp`` (FSDP2 ``fully_shard``), ``tp`` (``parallelize_module``, Colwise/Rowwise pairs) or ``pp``
(``torch.distributed.pipelining``), trains it and measures memory by category, step time, bytes per
collective and, for the pipeline, every forward/backward/send/recv event (``measure``, ``pp``).

Rank-side like ``ops/``: nothing here imports the session, tensor handles, magics or widgets.
"""
