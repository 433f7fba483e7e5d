"""A/B of the guide step's two batch uploads: `CupyMemory.upload` (one cudaMemcpyAsync from
the host array) against CuPy's ``asarray`` (pinned staging), alternating rounds in one
process (``python benchmarks/gpu/upload_ab.py``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    from _mlp import guide_step

    import ember
    from ember_triton._cupy import CupyMemory

    d = ember.device("cuda:0")
    step = guide_step(ember)
    direct = CupyMemory.upload

    def via_asarray(self, array):  # type: ignore[no-untyped-def]
        self.activate()
        return self.cupy.asarray(array).data

    for _ in range(20):
        step()
    d.synchronize()
    res: dict[str, list[float]] = {"memcpyAsync": [], "cupy.asarray": []}
    for _ in range(6):
        for name, fn in (("memcpyAsync", direct), ("cupy.asarray", via_asarray)):
            CupyMemory.upload = fn  # type: ignore[method-assign]
            step()
            d.synchronize()
            t = time.perf_counter()
            for _ in range(100):
                step()
            d.synchronize()
            res[name].append((time.perf_counter() - t) * 10)
    for name, ts in res.items():
        print(f"guide step, {name}: best {min(ts):.3f} ms, rounds {[round(x, 3) for x in ts]}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
