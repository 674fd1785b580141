"""Controller side of DistTensors: handles, factories, transfer paths, io, ``mg.map`` and ``mg.matmul``."""
