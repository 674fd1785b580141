"""Tensors on the rank: the shard store, blocks shared between ranks of a host, seeding, and the memory budget of a
CPU virtual device (``budget``, ``allocator_budget`` with its C++ allocator in ``native/``)."""
