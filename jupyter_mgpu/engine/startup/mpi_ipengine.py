"""ipyparallel's engine for its MPI launcher where mpi4py is not installed.

ipyparallel's ``MPIEngineSetLauncher`` always adds ``--mpi`` to the engine's command line, and that
option imports mpi4py (only to number the engines by MPI rank). jupyter_mgpu needs no MPI inside the
engines — the process group uses gloo or nccl, and each engine's local rank comes from the MPI
launcher's environment — so where mpi4py is missing the launcher runs
``python -m jupyter_mgpu.engine.startup.mpi_ipengine``: the stock ``ipengine``, without that option.
"""

from __future__ import annotations

import sys


def main() -> None:
    sys.argv = [a for a in sys.argv if a != "--mpi"]
    from ipyparallel.engine.app import main as ipengine

    ipengine()


if __name__ == "__main__":
    main()
