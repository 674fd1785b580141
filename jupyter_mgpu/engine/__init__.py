"""Code that runs inside the engines (one process per device): never imports the controller side.

Subpackages by seam: ``startup``, ``group``, ``watch``, ``execution``, ``program``, ``shards``, ``records``,
``wire``; ``state`` (the rank's process-wide state) and ``cuda_device`` are the leaves they share."""
