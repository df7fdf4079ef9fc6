"""The matmul peak the benchmarks' FLOPs utilisation is measured against, on this machine, in the same run."""

from __future__ import annotations

import time


def matmul_peak_gflops(dtype=None, size: int = 2048, runs: int = 20, device: str = "cpu") -> float:
    """The best of three timings of ``runs`` ``size``-cubed matmuls in ``dtype`` (default bf16) on ``device``."""
    import torch

    dtype = dtype or torch.bfloat16
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(3):
        a @ b
    sync()
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(runs):
            a @ b
        sync()
        best = max(best, runs * 2 * size**3 / (time.perf_counter() - start) / 1e9)
    return best
