"""ember's distributed engines: MPI (mpi4py) and NCCL (CuPy), and the ``ember-run`` launcher.

The engines are found by ``ember.distributed.init`` through the entry-point group
``ember.distributed``; importing this package imports neither mpi4py nor CuPy.

Examples
--------
>>> import ember_distributed
>>> ember_distributed.mpirun_env({})["OMPI_ALLOW_RUN_AS_ROOT"]
'1'
"""

from __future__ import annotations

from .launch import mpirun_command as mpirun_command, mpirun_env as mpirun_env

__all__ = ["mpirun_command", "mpirun_env"]

__version__ = "0.1.0"
