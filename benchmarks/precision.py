"""bf16 against fp32 on this machine, side by side in one run: what `native` precision resolves to and why.

* a 1024-cubed matmul in each dtype (``benchmarks/peak.py``), in GFLOP/s;
* one learner-shaped training step of the shipped base (``models/base-v1``): forward, backward and AdamW on a
  batch of random tokens, the weights in each dtype as DeepSpeed's bf16 mode holds them;
* sampling through the vLLM engine (``serving.engine.PolicyEngine``, as the rollout workers' deployment does):
  32 chat prompts x 64 new tokens, in tokens/s.

Prints each pair and the bf16/fp32 speed ratio, and what ``native`` resolves to here (serving/hardware.py). On a
CPU with AMX bf16 is the fast one; on an AVX2-only CPU PyTorch emulates it and fp32 wins by a wide margin.

    python benchmarks/precision.py [--model models/base-v1] [--batch 8] [--length 256] [--steps 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def train_step_seconds(model_path: str, dtype, batch: int, length: int, steps: int) -> float:
    """The best of ``steps`` timed training steps (after one warm-up step) with the weights in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    tokens = torch.randint(0, model.config.vocab_size, (batch, length))
    best = float("inf")
    for step in range(steps + 1):
        start = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step:  # the first step warms up the kernels
            best = min(best, time.perf_counter() - start)
    return best


def sampling_tokens_per_s(model_path: str, dtype: str, prompts: int = 32, new_tokens: int = 64) -> float:
    """Sampled tokens/s of the vLLM engine serving ``model_path`` in ``dtype`` (``benchmarks/generation.py``)."""
    import asyncio

    from transformers import AutoTokenizer

    from benchmarks.generation import chat_prompts, engine_tokens_per_s
    from serving.settings import SamplingConfig, ServingConfig

    texts = chat_prompts(AutoTokenizer.from_pretrained(model_path))[:prompts]
    sampling = SamplingConfig(temperature=1.0, max_tokens=new_tokens, ignore_eos=True, seed=0)
    config = ServingConfig(model=str(Path(model_path).resolve()), dtype=dtype)
    return asyncio.run(engine_tokens_per_s(config, texts, sampling))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/base-v1")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    import torch

    from benchmarks.peak import matmul_peak_gflops
    from serving.hardware import native_bf16, resolve_precision

    print(
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}; native bf16: {native_bf16('cpu')}; "
        f"`native` resolves to {resolve_precision('native', 'cpu')}"
    )
    fp32 = matmul_peak_gflops(torch.float32, size=1024, runs=5)
    bf16 = matmul_peak_gflops(torch.bfloat16, size=1024, runs=5)
    print(f"matmul 1024^3: fp32 {fp32:.1f} GFLOP/s, bf16 {bf16:.1f} GFLOP/s; bf16/fp32 speed {bf16 / fp32:.2f}")
    fp32_s = train_step_seconds(args.model, torch.float32, args.batch, args.length, args.steps)
    bf16_s = train_step_seconds(args.model, torch.bfloat16, args.batch, args.length, args.steps)
    step = f"training step ({args.model}, {args.batch} x {args.length} tokens)"
    print(f"{step}: fp32 {fp32_s:.2f} s, bf16 {bf16_s:.2f} s; bf16/fp32 speed {fp32_s / bf16_s:.2f}")
    fp32_tok = sampling_tokens_per_s(args.model, "float32")
    bf16_tok = sampling_tokens_per_s(args.model, "bfloat16")
    print(
        f"vLLM sampling (32 prompts x 64 tokens): fp32 {fp32_tok:.0f} tok/s, bf16 {bf16_tok:.0f} tok/s; "
        f"bf16/fp32 speed {bf16_tok / fp32_tok:.2f}"
    )


if __name__ == "__main__":
    main()
