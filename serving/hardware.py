"""Whether the hardware computes bf16 natively, and the precision a config's ``native`` resolves to there.

bf16 is fast only where the hardware has bf16 arithmetic: a CUDA GPU that supports it, or a CPU with AMX
or AVX512-BF16. Elsewhere PyTorch emulates it: on an AVX2-only CPU ``benchmarks/precision.py`` measured a
bf16 matmul ~150x, a training step of the shipped base ~18x and vLLM sampling ~3x slower than in fp32. The
shipped recipes ask for ``native``: bf16 where it is native, fp32 elsewhere. The learner and the serving
engine resolve it on the machine they run on, not on the driver's.
"""

from __future__ import annotations

from typing import Literal

Precision = Literal["fp32", "bf16", "native"]


def native_bf16(device: str = "cpu") -> bool:
    """Whether ``device`` ("cpu" or "cuda[:n]") computes bf16 natively."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # torch.cpu's own CPU-feature checks
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def resolve_precision(requested: Precision, device: str) -> Literal["fp32", "bf16"]:
    """``native`` -> "bf16" where ``device`` computes it natively, else "fp32"; the other values as given."""
    if requested == "native":
        return "bf16" if native_bf16(device) else "fp32"
    return requested


def resolve_dtype(requested: str, device: str) -> str:
    """The serving engine's dtype: ``native`` -> "bfloat16" or "float32" as above; the other values as given."""
    if requested == "native":
        return {"bf16": "bfloat16", "fp32": "float32"}[resolve_precision("native", device)]
    return requested


def slow_bf16_warning(precision: str, device: str) -> str | None:
    """A warning when bf16 ("bf16" or "bfloat16") is asked for explicitly on a device that emulates it."""
    if precision in ("bf16", "bfloat16") and not native_bf16(device):
        return (
            f"bf16 was asked for on a {device} without native bf16 (a CPU needs AMX or AVX512-BF16): it is emulated, "
            "many times slower than fp32 (precision/dtype 'native' gives fp32 here and bf16 where it is native)"
        )
    return None
