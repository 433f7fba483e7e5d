"""Greedy decode of the Llama-style model (``_llama.py``) in ember and PyTorch with the same
weights: tokens/s of each mode, interleaved in one process, and a check that every mode
decodes PyTorch's tokens.

Modes: ``torch eager``, ``ember eager`` and ``ember compiled`` (the decode step through
``ember.compile``: traced once, replayed for every position; a CUDA graph on ``cuda:N``).
Each round runs one full decode (prefill + ``--new`` tokens) per mode, the mode order
rotating per round; the figure is the median round's decode tokens/s (batch x new tokens /
time of the steps after the prefill).

Run on the CPU, one thread for both (the figure in docs/serving.md)::

    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/gpu/llama_decode.py \\
        --device cpu --small --batch 1 --prompt 32 --new 128 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # after the thread settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _llama as L

MODES = ("torch eager", "ember eager", "ember compiled")


class Mode:
    """One framework's model and decode loop on the device, timed per run."""

    def __init__(self, name: str, cfg: L.LlamaConfig, state: dict[str, np.ndarray],
                 device: str, batch: int) -> None:
        self.name = name
        if name.startswith("torch"):
            import torch

            self.lib, self.dev = torch, device if device.startswith("cuda") else "cpu"
            self.model = L.llama(torch, cfg, batch, self.dev)
            self.model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
            self.no_grad: Any = torch.inference_mode
        else:
            import ember

            self.lib, self.dev = ember, device
            self.model = L.llama(ember, cfg, batch, device)
            self.model.load_state_dict(state)
            self.no_grad = ember.no_grad
        step = L.greedy_step(self.model)
        if name == "ember compiled":
            import ember

            step = ember.compile(step)
        self.step = step

    def run(self, prompt: np.ndarray, new: int) -> tuple[np.ndarray, float]:
        """Decode once; the tokens and the seconds of the steps after the prefill (both ends
        wait for the device: a read of the tokens)."""
        lib = self.lib
        with self.no_grad():
            p = lib.tensor(prompt, device=self.dev)
            first = self.model(p, 0)[:, -1].argmax(-1)
            _ = first.cpu() if lib.__name__ == "torch" else first.numpy()  # prefill done
            t0 = time.perf_counter()
            out = [p, first[:, None]]
            token = first
            for i in range(new - 1):
                pos = lib.tensor(prompt.shape[1] + i, device=self.dev)
                token = self.step(token[:, None], pos)
                out.append(token[:, None])
            tokens = lib.cat(out, 1)
            host = tokens.cpu().numpy() if lib.__name__ == "torch" else tokens.numpy()
            return host, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--tiny", action="store_true", help="the test's model")
    size.add_argument("--small", action="store_true", help="the CPU figure's model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--std", type=float, default=1.0,
                    help="weights' std (1.0: greedy tokens vary, so the check means something)")
    args = ap.parse_args(argv)
    cfg = L.TINY if args.tiny else L.SMALL if args.small else L.LLAMA_1B
    if args.prompt + args.new > cfg.max_seq:
        ap.error(f"--prompt + --new must fit the cache of {cfg.max_seq} positions")
    import torch

    torch.set_num_threads(int(os.environ["OPENBLAS_NUM_THREADS"]))
    state = L.init_state(cfg, std=args.std)
    prompt = np.random.default_rng(0).integers(0, cfg.vocab, (args.batch, args.prompt))
    modes = [Mode(m, cfg, state, args.device, args.batch) for m in MODES]
    times: dict[str, list[float]] = {m.name: [] for m in modes}
    tokens: dict[str, np.ndarray] = {}
    for r in range(args.rounds + 1):  # round 0 warms up (and traces the compiled step)
        for m in modes[r % len(modes):] + modes[:r % len(modes)]:
            out, sec = m.run(prompt, args.new)
            tokens[m.name] = out
            if r:
                times[m.name].append(sec)
    ref = tokens["torch eager"]
    ok = all(np.array_equal(tokens[m], ref) for m in MODES)
    print(f"llama decode: {cfg}, batch {args.batch}, prompt {args.prompt}, new {args.new}, "
          f"device {args.device}, threads {os.environ['OPENBLAS_NUM_THREADS']}, "
          f"load {os.getloadavg()[0]:.2f}")
    base = statistics.median(times["torch eager"])
    for m in MODES:
        med = statistics.median(times[m])
        rate = args.batch * (args.new - 1) / med
        print(f"  {m:15s} {rate:9.1f} tokens/s  {med / (args.new - 1) * 1e3:7.2f} ms/step  "
              f"x{base / med:.2f} of torch eager")
    print(f"greedy tokens equal PyTorch's: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
