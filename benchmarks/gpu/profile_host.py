"""Where the host time of eager ops goes on cuda:0: cProfile of a loop of small adds and of
MLP training steps (run it the way ``check.py`` runs things: ``python profile_host.py``)."""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    import ember

    d = ember.device("cuda:0")
    x = ember.ones((1024,), device=d)
    for _ in range(200):
        x + x
    d.synchronize()
    t = time.perf_counter()
    for _ in range(5000):
        x + x
    print(f"add: {(time.perf_counter() - t) / 5000 * 1e6:.1f} us per op")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5000):
        x + x
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)

    from _mlp import mlp_step

    step = mlp_step(ember)
    for _ in range(10):
        step()
    d.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(50):
        step()
    d.synchronize()
    prof.disable()
    st = pstats.Stats(prof)
    print("MLP step: ops by primitive calls")
    st.sort_stats("tottime").print_stats(30)
    st.sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
        sys.exit(0)
    import subprocess

    sys.path.insert(0, str(HERE))
    from check import workspace_env

    with tempfile.TemporaryDirectory() as tmp:
        env = workspace_env(Path(tmp))
        sys.exit(subprocess.run([sys.executable, __file__, "--child"], env=env,
                                check=False).returncode)
