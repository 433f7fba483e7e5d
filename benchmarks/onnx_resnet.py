"""Inference time of an imported ResNet-18 on the CPU: ember beside onnxruntime, in one
process, interleaved, at one thread on each side and at each side's default.

Run: ``.venv/bin/python benchmarks/onnx_resnet.py [--width 64] [--size 224] [--rounds 7]``
(needs torch to write the model, onnx and onnxruntime).  The model is ResNet-18's layout with
random weights, exported by torch (TorchScript exporter, opset 17), batch 1.  Prints the median
seconds per inference and the ratio ember / onnxruntime (lower is better; the goal is <= 2),
with the time and load average.

At default threads onnxruntime's session runs with spin-waiting off
(``session.intra_op.allow_spinning = 0``): its spinning workers, on by default, outlive each
run and took the cores from whatever ran next: on the busy 2-core VM (2026-12-06) ember
right after it took 85-95 ms instead of 55-60, and onnxruntime itself 47-50 ms instead of 30.
Without spinning both sides are faster, so the ratio is against onnxruntime's better setting
here.  ember's helpers wait awake for at most 1 ms after a job; the loop sleeps 3 ms between
the two sides' runs so that neither runs beside the other's leftover threads.  At default
threads ember's `cpu` device runs a layer on as many threads as the BLAS allows and other
processes left cores idle (``ember_cpu._workers``); the line says on how many of the timed
runs that was two or more.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from threadpoolctl import threadpool_limits

import ember
import ember.onnx
from ember_cpu import _workers  # how many threads ember's layers ran on

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "onnx"))
import torch_models  # the tests' small architectures

#: seconds between one side's run and the other's: ember's helper threads wait awake for up
#: to 1 ms after a layer (``ember_cpu._workers.SPIN_US``) and took a core from onnxruntime's
#: run right after (9.2 -> 9.8 ms on the 2-core VM); each side starts with the other's
#: threads asleep
_SETTLE = 0.003


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = torch_models.ResNet(width=args.width, blocks=(2, 2, 2, 2), classes=1000)
    data = torch_models.export(model, (torch.randn(1, 3, args.size, args.size),), ["x"],
                               {"x": {0: "batch"}}, 17)
    proto = onnx.load_from_string(data)
    x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(
        np.float32)
    m = ember.onnx.load(proto, device="cpu")
    ex = ember.tensor(x)
    print(f"ResNet-18 layout, width {args.width}, input 1x3x{args.size}x{args.size}, "
          f"{sum(p.numel() for p in m.parameters()) / 1e6:.1f}M parameters, "
          f"{os.cpu_count()} cores")
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
          "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    for threads in (1, None):
        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
        else:  # see the module's docstring
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        with threadpool_limits(limits=threads):
            want = sess.run(None, {"x": x})[0]
            got = m(ex).numpy()  # warm both, and check they agree
            err = float(np.max(np.abs(got - want)))
            assert err <= 1e-4 * (1 + float(np.max(np.abs(want)))), err
            t_em, t_rt, wide = [], [], 0
            for _ in range(args.rounds):  # interleaved: load on the machine hits both alike
                t0 = time.perf_counter()
                m(ex).numpy()
                t_em.append(time.perf_counter() - t0)
                wide += _workers.threads() > 1
                time.sleep(_SETTLE)
                t0 = time.perf_counter()
                sess.run(None, {"x": x})
                t_rt.append(time.perf_counter() - t0)
                time.sleep(_SETTLE)
        em, rt = statistics.median(t_em), statistics.median(t_rt)
        label = "1 thread each" if threads else "default threads"
        print(f"{label:>16}: ember {em * 1e3:8.1f} ms   onnxruntime {rt * 1e3:8.1f} ms   "
              f"ratio {em / rt:5.2f}x   (max abs diff {err:.1e}"
              + ("" if threads else f"; ember on 2+ threads in {wide} of {args.rounds}") + ")")


if __name__ == "__main__":
    main()
