"""Data-parallel figures on N GPUs with the NCCL engine: all_reduce bus bandwidth by size, and
MLP training throughput on 1, 2, 4 and 8 GPUs with the scaling efficiency.

    python benchmarks/gpu/distributed.py [--gpus 1,2,4,8] [--steps 50] [--out DIR]

Each configuration is one ``ember-run -n N --launcher spawn`` job of this same script in
``--worker`` mode (one process per GPU, the NCCL unique id handed over in a rendezvous folder).
Bus bandwidth is NCCL's convention, ``2(n-1)/n * bytes / time``, so it compares directly with
``all_reduce_perf`` of nccl-tests.  The MLP is 784-1024-1024-10, batch 512 per GPU, Adam, fp32,
on ``autodiff<cuda:r>``, gradients averaged by ``ember.distributed.GradientBuckets``; scaling
efficiency is ``throughput(N) / (N * throughput(1))``.  Needs what ``check.py`` needs (no
``pip install``: the checkout is put on ``sys.path``), plus CuPy with NCCL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES_MB = (1, 4, 16, 64, 256, 1024)


# -- the worker: one rank of one configuration ---------------------------------------------------

def _sync(comm: object) -> None:
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    comm.barrier()  # type: ignore[attr-defined]  # a Communicator


def bus_bandwidth(comm: object, device: str, sizes_mb: tuple[int, ...], iters: int
                  ) -> list[dict[str, float]]:
    import ember

    n = comm.world_size  # type: ignore[attr-defined]
    rows = []
    for mb in sizes_mb:
        x = ember.ones(mb * 2**20 // 4, device=device)  # float32
        for _ in range(3):
            comm.all_reduce(x, "sum")  # type: ignore[attr-defined]
        times = []
        for _ in range(iters):
            _sync(comm)
            t0 = time.perf_counter()
            comm.all_reduce(x, "sum")  # type: ignore[attr-defined]  # waits for the GPU
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        nbytes = mb * 2**20
        rows.append({"mb": mb, "time_ms": t * 1e3, "algbw_gbs": nbytes / t / 1e9,
                     "busbw_gbs": 2 * (n - 1) / n * nbytes / t / 1e9})
    return rows


def mlp_throughput(comm: object, device: str, steps: int, batch: int = 512) -> float:
    import numpy as np

    import ember
    from ember import nn, optim
    from ember.distributed import GradientBuckets
    from ember.nn import functional as F

    dev = f"autodiff<{device}>"
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).to(dev)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    params = list(model.parameters())
    buckets = GradientBuckets(params, comm)  # type: ignore[arg-type]
    rank = comm.rank  # type: ignore[attr-defined]
    rng = np.random.default_rng(rank)
    x = ember.tensor(rng.normal(size=(batch, 784)).astype(np.float32), device=dev)
    y = ember.tensor(rng.integers(0, 10, size=batch), device=dev)

    def step() -> ember.Tensor:
        loss = F.cross_entropy(model(x), y)
        opt.step(buckets.reduce(loss.backward()))
        return loss

    for _ in range(10):
        step()
    _sync(comm)
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    float(loss.item())
    _sync(comm)
    elapsed = time.perf_counter() - t0
    return comm.world_size * batch * steps / elapsed  # type: ignore[attr-defined, no-any-return]


def worker(out: Path, steps: int, iters: int) -> None:
    from ember_distributed.nccl import local_rank

    import ember.distributed as dist

    device = f"cuda:{local_rank()}"
    comm = dist.init("nccl", device=device)
    result: dict[str, object] = {"world": comm.world_size}
    if comm.world_size > 1:
        result["all_reduce"] = bus_bandwidth(comm, device, SIZES_MB, iters)
    result["mlp_items_per_s"] = mlp_throughput(comm, device, steps)
    if comm.rank == 0:
        (out / f"world{comm.world_size}.json").write_text(json.dumps(result, indent=1))
    dist.shutdown()


# -- the driver ----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpus", default="1,2,4,8", help="world sizes to measure")
    p.add_argument("--steps", type=int, default=50, help="timed MLP steps")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size")
    p.add_argument("--out", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="ember-dist-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        worker(out, args.steps, args.iters)
        return 0

    sys.path.insert(0, str(HERE))
    from check import workspace_env  # the checkout on sys.path, entry points declared

    env = workspace_env(out)
    os.environ.update(env)
    sys.path[:0] = env["PYTHONPATH"].split(os.pathsep)
    import cupy

    have = cupy.cuda.runtime.getDeviceCount()
    worlds = [n for n in (int(g) for g in args.gpus.split(",")) if n <= have]
    from ember_distributed.launch import main as ember_run

    for n in worlds:
        print(f"== {n} GPU(s) ==", flush=True)
        rc = ember_run(["-n", str(n), "--launcher", "spawn", sys.executable, __file__,
                        "--worker", "--out", str(out), "--steps", str(args.steps),
                        "--iters", str(args.iters)])
        if rc != 0:
            print(f"{n} GPU(s): failed with status {rc}", file=sys.stderr)
            return rc
    results = {n: json.loads((out / f"world{n}.json").read_text()) for n in worlds}
    print(f"\nall_reduce (float32, sum), median of {args.iters}; bus bw = 2(n-1)/n * bytes / t")
    print(f"{'GPUs':>4} {'MB':>6} {'time ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for n, r in results.items():
        for row in r.get("all_reduce", []):
            print(f"{n:>4} {row['mb']:>6} {row['time_ms']:>9.3f} {row['algbw_gbs']:>11.1f} "
                  f"{row['busbw_gbs']:>11.1f}")
    base = results.get(1, {}).get("mlp_items_per_s")
    print("\nMLP 784-1024-1024-10, batch 512/GPU, Adam, fp32")
    print(f"{'GPUs':>4} {'items/s':>10} {'scaling eff.':>13}")
    for n, r in results.items():
        eff = "" if not base else f"{r['mlp_items_per_s'] / (n * base):>12.1%}"
        print(f"{n:>4} {r['mlp_items_per_s']:>10.0f} {eff:>13}")
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(f"\nresults in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
