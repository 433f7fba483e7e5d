"""One rank of the collectives test: run every collective, save the results for the test.

    mpirun -n 2 python collectives_worker.py OUT_DIR cpu [opencl:0]
    ember-run -n 2 --launcher spawn python collectives_worker.py OUT_DIR cuda   # NCCL

The device ``cuda`` means this rank's GPU (``cuda:<local rank>``) and selects the NCCL engine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from cases import DTYPES, OPS, rank_input

import ember
import ember.distributed as dist


def main() -> int:
    out_dir, devices = Path(sys.argv[1]), sys.argv[2:]
    if devices == ["cuda"]:
        from ember_distributed.nccl import local_rank

        devices = [f"cuda:{local_rank()}"]
        comm = dist.init("nccl", device=devices[0])
    else:
        comm = dist.init("mpi")
    results: dict[str, np.ndarray] = {}
    for dev in devices:
        name = "cuda" if dev.startswith("cuda") else dev  # the keys do not name the GPU
        for dt in DTYPES:
            x = ember.from_numpy(rank_input(comm.rank, dt), device=dev)
            before = x.numpy().copy()
            for op in OPS:
                results[f"all_reduce-{op}-{dt}-{name}"] = _check(comm.all_reduce(x, op), x)
            for op in ("sum", "mean"):
                results[f"reduce_scatter-{op}-{dt}-{name}"] = _check(
                    comm.reduce_scatter(x, op), x)
            for src in (0, 1):
                results[f"broadcast-{src}-{dt}-{name}"] = _check(comm.broadcast(x, src), x)
            results[f"all_gather-{dt}-{name}"] = _check(comm.all_gather(x), x)
            # tensors are values: no collective may have written into its input
            np.testing.assert_array_equal(x.numpy(), before)
    # barrier: every rank marks its arrival before it; after it, every mark must be there
    (out_dir / f"arrived{comm.rank}").write_text("")
    comm.barrier()
    results["barrier-seen"] = np.array(sorted(
        int(p.name.removeprefix("arrived")) for p in out_dir.glob("arrived*")))
    results["world"] = np.array([comm.rank, comm.world_size])
    np.savez(out_dir / f"rank{comm.rank}.npz", **results)
    comm.barrier()
    return 0


def _check(result: ember.Tensor, x: ember.Tensor) -> np.ndarray:
    if result.device is not x.device or result.dtype != x.dtype:
        raise AssertionError(f"result on {result.device} {result.dtype}, input on {x.device} "
                             f"{x.dtype}")
    return result.numpy()


if __name__ == "__main__":
    sys.exit(main())
