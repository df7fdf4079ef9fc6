"""The learner's DeepSpeed engine and GRPO loss on one accelerator with a randomly initialised Qwen3-4B-shaped
model in bf16 (``--precision native``: bf16 where the device computes it natively, fp32 elsewhere): step time,
training tokens/s, peak memory and FLOPs utilisation against the matmul peak in the same precision (docs/scaling.md).

It runs the project's ``actors.learner.Learner`` in this process, without a Ray cluster (the GPU machines
this was measured on have torch, transformers and DeepSpeed but no Ray): a stand-in ``ray`` module turns the
actor class back into a plain class. One GRPO step trains ``--prompts`` x ``--group`` sequences of
``--prompt-tokens`` + ``--response-tokens`` random tokens (rewards half 1, half 0 in every group, so every
group carries signal; behaviour logprobs those of a uniform distribution); the first step warms up.

    python benchmarks/gpu_learner.py --out DIR                # Qwen3-4B shape (4.02B parameters), on CUDA
    python benchmarks/gpu_learner.py --out DIR --shape tiny   # the same path with a tiny model (CPU check)

Writes DIR/gpu_learner.json after every phase, so a run cut short still reports what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Qwen3-4B's config.json (hidden 2560, 36 layers, MLP 9728, 32 query / 8 KV heads of 128, tied embeddings)
SHAPES = {
    "qwen3-4b": dict(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    "tiny": dict(
        vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True,
    ),
}  # fmt: skip


def in_process_ray() -> None:
    """A stand-in ``ray`` module: ``@ray.remote`` leaves the class as it is and ``ray.get`` returns its input."""
    ray = types.ModuleType("ray")
    ray.remote = lambda *args, **kwargs: args[0] if args and callable(args[0]) else (lambda cls: cls)
    ray.get = lambda refs: refs
    ray.ObjectRef = object
    ray.util = types.SimpleNamespace(get_node_ip_address=lambda: "127.0.0.1")
    sys.modules["ray"] = ray


def random_model(shape: str, folder: Path, device: str) -> int:
    """Save a randomly initialised model of ``shape`` (bf16) with the shipped base's tokenizer; its size."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(**SHAPES[shape])
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    del model
    base = Path(__file__).resolve().parents[1] / "models" / "base-v1"
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(base / name, folder / name)
    return parameters


def synthetic_batch(prompts: int, group: int, prompt_tokens: int, response_tokens: int, vocab: int, seed: int):
    """One step's scored samples: random tokens, rewards alternating 1/0 within each group."""
    import numpy as np

    from actors.trajectory import TrajectoryBatch

    rng = np.random.default_rng(seed)
    rows = prompts * group
    uniform = -math.log(vocab)
    return TrajectoryBatch(
        instance_ids=[f"synthetic-{p}" for p in range(prompts)],
        features=[(0, 0, 0, 0)] * prompts,
        levels=[{}] * prompts,
        replayed=[False] * prompts,
        group=[r // group for r in range(rows)],
        prompt_ids=[rng.integers(1, 800, prompt_tokens).tolist() for _ in range(rows)],
        response_ids=[rng.integers(1, 800, response_tokens).tolist() for _ in range(rows)],
        logprobs=[[uniform] * response_tokens for _ in range(rows)],
        finish_reason=["length"] * rows,
        text=[""] * rows,
        weight_version=[0] * rows,
        reward=[float(r % 2 == 0) for r in range(rows)],
        valid=[r % 2 == 0 for r in range(rows)],
        optimal=[False] * rows,
        failure=[None if r % 2 == 0 else "hole" for r in range(rows)],
        fault_char=[None] * rows,
        regret=[0.0] * rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the model and gpu_learner.json")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps; the first warms up")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--response-tokens", type=int, default=1500)
    parser.add_argument("--micro-batch", type=int, default=2, help="sequences per forward/backward")
    parser.add_argument("--updates-per-batch", type=int, default=1, help="optimizer steps on each batch")
    parser.add_argument("--zero-stage", type=int, default=0)
    parser.add_argument("--threads", type=int, default=8, help="torch threads when on CPU")
    parser.add_argument("--precision", choices=["native", "bf16", "fp32"], default="native")
    args = parser.parse_args()

    in_process_ray()
    import torch

    from actors.learner import Learner
    from actors.settings import DeepSpeedConfig, GRPOConfig
    from benchmarks.peak import matmul_peak_gflops
    from serving.hardware import resolve_precision

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    report: dict = {"shape": args.shape, "device": torch.cuda.get_device_name() if cuda else "cpu"}
    report |= {"torch": torch.__version__, "args": vars(args)}

    def save():
        (out / "gpu_learner.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report), flush=True)

    report["precision"] = precision = resolve_precision(args.precision, device)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    report["peak_tflops"] = matmul_peak_gflops(dtype, size=8192 if cuda else 1024, device=device) / 1e3
    started = time.perf_counter()
    report["parameters"] = random_model(args.shape, out / "model", device)
    report["model_init_s"] = time.perf_counter() - started
    save()

    deepspeed = DeepSpeedConfig(zero_stage=args.zero_stage, precision=precision, torch_adam=True)
    learner = Learner(rank=0, world_size=1, model=str(out / "model"), settings=deepspeed, learning_rate=1e-6,
                      seed=0, warmup=0)  # fmt: skip
    started = time.perf_counter()
    report["setup"] = learner.setup(*learner.rendezvous(), args.micro_batch, args.threads, reference=False)
    report["setup_s"] = time.perf_counter() - started
    if cuda:
        report["memory_after_setup_gib"] = torch.cuda.max_memory_allocated() / 2**30
    save()

    settings = GRPOConfig(
        prompts_per_step=args.prompts,
        group_size=args.group,
        micro_batch_size=args.micro_batch,
        updates_per_batch=args.updates_per_batch,
    )
    vocab = SHAPES[args.shape]["vocab_size"]
    report["steps"] = []
    for step in range(args.steps):
        batch = synthetic_batch(args.prompts, args.group, args.prompt_tokens, args.response_tokens, vocab, step)
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        stats = learner.train_grpo([batch], settings)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        tokens = args.prompts * args.group * (args.prompt_tokens + args.response_tokens)
        report["steps"].append(
            {"seconds": seconds, "tokens": tokens}
            | {key: stats.get(key) for key in ("loss", "grad_norm", "updates", "train_tokens", "ratio_mean")}
        )
        if cuda:
            report["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            report["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
        timed = report["steps"][1:] or report["steps"]
        seconds_per_step = sum(s["seconds"] for s in timed) / len(timed)
        report["seconds_per_step"] = seconds_per_step
        report["train_tokens_per_s"] = tokens / seconds_per_step
        # training FLOPs 6 x parameters x tokens (attention's own FLOPs left out), over the measured peak
        report["mfu"] = 6 * report["parameters"] * tokens / seconds_per_step / (report["peak_tflops"] * 1e12)
        save()

    started = time.perf_counter()
    weights = learner.weights()  # what a weight sync gathers on rank 0 before publishing it
    report["weights_to_host_s"] = time.perf_counter() - started
    report["weights_gib"] = sum(a.nbytes for a in weights.values()) / 2**30
    save()


if __name__ == "__main__":
    main()
