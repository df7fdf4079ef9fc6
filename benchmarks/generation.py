"""Generation throughput: the Serve deployment vs transformers ``generate``, side by side in one run.

For the tiny model and a ~50M-parameter one (both built locally), 64 chat prompts (MAPF instances) x 128
new tokens, sampling at temperature 1:

* transformers ``generate`` on the whole batch (left padding), the named peer;
* the policy through the Ray Serve deployment (handle calls), and the vLLM engine directly (to see
  what the serving layer costs);
* the fraction of this CPU's measured matmul peak that generation reaches (2 x parameters FLOPs a token);
* weight-update latency, and its share of one training step (forward + backward + AdamW on the
  rollout batch of this benchmark, measured here).

    python benchmarks/generation.py [--models tiny 50m models/base-v1] [--dtype float32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS, NEW_TOKENS = 64, 128


def chat_prompts(tokenizer) -> list[str]:
    from env.benchmark import VALIDATION
    from env.instance import read_instances
    from env.prompt import render_prompt

    instances = [i for i in read_instances(VALIDATION.path) if i.size <= 6][:PROMPTS]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": render_prompt(i)}], tokenize=False, add_generation_prompt=True
        )
        for i in instances
    ]


def transformers_tokens_per_s(model, tokenizer, prompts) -> float:
    import torch

    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        start = time.perf_counter()
        out = model.generate(
            **batch, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.0,
            pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
        seconds = time.perf_counter() - start
    return (out.shape[1] - batch["input_ids"].shape[1]) * len(prompts) / seconds


async def engine_tokens_per_s(config, prompts: list[str], sampling) -> float:
    """Sampled tokens/s of the vLLM engine alone (``serving.engine.PolicyEngine``) serving ``config``, after a
    warm-up request of 4 prompts."""
    from serving.engine import PolicyEngine

    engine = PolicyEngine(config)
    await engine.generate(prompts[:4], sampling)
    start = time.perf_counter()
    results = await engine.generate(prompts, sampling)
    seconds = time.perf_counter() - start
    engine.shutdown()
    return sum(len(s["token_ids"]) for r in results for s in r["samples"]) / seconds


def training_step_s(model, tokenizer, prompts, micro_batch: int = 4) -> float:
    """One optimizer step on the benchmark's rollout batch (prompts + 128 tokens): forward + backward in
    micro-batches of ``micro_batch`` sequences (gradient accumulation), then AdamW."""
    import torch

    tokenizer.padding_side = "right"
    texts = [p + " UP," * NEW_TOKENS for p in prompts]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()
    start = time.perf_counter()
    for i in range(0, len(texts), micro_batch):
        batch = tokenizer(texts[i : i + micro_batch], return_tensors="pt", padding=True)
        loss = model(**batch, labels=batch["input_ids"]).loss * len(batch["input_ids"]) / len(texts)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return time.perf_counter() - start


def compare_generation(models: list[str], dtype: str) -> list[tuple]:
    """Print and return the comparison for each of ``models`` (a preset name, built here, or a model folder)."""
    import ray
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.peak import matmul_peak_gflops
    from serving.deployment import deploy, undeploy
    from serving.model import PRESETS, count_parameters, init_model
    from serving.settings import SamplingConfig, ServingConfig
    from serving.weights import to_numpy

    torch_dtype = getattr(torch, dtype)
    peak = matmul_peak_gflops(torch_dtype, size=1024, runs=20)
    print(f"matmul peak ({dtype}, {torch.get_num_threads()} threads): {peak:.1f} GFLOP/s")
    sampling = SamplingConfig(temperature=1.0, max_tokens=NEW_TOKENS, ignore_eos=True, seed=0)
    ray.init(address="local", include_dashboard=False)  # a new local cluster, never a stale one
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in models:
            path = Path(name) if Path(name).is_dir() else init_model(Path(folder) / name, PRESETS[name])
            name = path.name if Path(name).is_dir() else name
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
            parameters = count_parameters(model)
            prompts = chat_prompts(tokenizer)
            config = ServingConfig(model=str(path.resolve()), dtype=dtype)

            hf = transformers_tokens_per_s(model, tokenizer, prompts)

            direct = asyncio.run(engine_tokens_per_s(config, prompts, sampling))
            policy = deploy(config, name=f"bench-{name}", route_prefix=f"/bench-{name}")
            policy.generate(prompts[:4], sampling)  # warm-up
            start = time.perf_counter()
            results = policy.generate(prompts, sampling)
            served = sum(len(s["token_ids"]) for r in results for s in r["samples"]) / (time.perf_counter() - start)
            arrays = to_numpy(model.state_dict())
            start = time.perf_counter()
            policy.update_weights(arrays, policy.weight_version() + 1)
            update_s = time.perf_counter() - start
            undeploy(policy.name)
            step_s = training_step_s(model, tokenizer, prompts)
            share = 2 * parameters * served / 1e9 / peak
            rows.append((name, parameters, hf, direct, served, served / hf, share, update_s, step_s))
    print(
        f"\n{'model':<8} {'params':>11} {'HF tok/s':>9} {'engine':>8} {'served':>8} {'served/HF':>9} "
        f"{'of peak':>8} {'update s':>9} {'train step s':>12} {'update/step':>11}"
    )
    for name, params, hf, direct, served, ratio, share, update_s, step_s in rows:
        print(
            f"{name:<8} {params:>11,} {hf:>9.0f} {direct:>8.0f} {served:>8.0f} {ratio:>8.2f}x "
            f"{100 * share:>7.1f}% {update_s:>9.2f} {step_s:>12.2f} {100 * update_s / step_s:>10.1f}%"
        )
    ray.shutdown()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "50m"], help="presets or model folders")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    compare_generation(args.models, args.dtype)
    print("targets: served/HF >= 1.5x on the ~50M model; weight update < 5% of a training step")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
