"""GRPO throughput: our distributed trainer vs TRL's ``GRPOTrainer`` (the named peer), side by side in one run.

Same model (built locally: the tiny preset and a ~50M-parameter one), same instances and prompts (chat
template), same reward (the evaluator), group size, prompts per step, completion length, temperature and
learning rate; fp32 on CPU. Ours: a local Ray cluster with the vLLM deployment, rollout workers, the
buffer and a DeepSpeed learner; TRL: ``GRPOTrainer`` with transformers generation (benchmarks/trl_peer.py).
Both time the steps after one warm-up step. A randomly initialised model earns no reward, so every group
has zero variance: ours keeps those groups here (``drop_zero_variance: false``) so it trains on every
sample like TRL does.

Prints samples/s and seconds per step for both and their ratio, our step-time breakdown (sample,
generate, score, train, sync), weight sync as a share of the step and Ray overhead (wall minus parts), and
our step's model FLOPs utilisation: (2 x parameters x generated tokens + 6 x parameters x trained tokens)
(+ 2 x parameters x trained tokens for the reference's forward with ``--kl-coef``) per second of the step
over the bf16 matmul peak measured in the same run (benchmarks/pretrain.py); the
trained tokens are those the learner's forward passes compute (with shared prompts, a group's prompt once
per micro-batch). ``--plain-prompts`` also runs ours with ``grpo.shared_prompts: false`` (every sample's
prompt computed) in the same run, so the two learner paths are compared side by side too.

    python benchmarks/rl_throughput.py [--presets tiny 50m] [--steps 4] [--overlap]
    python benchmarks/rl_throughput.py --model models/base-v1 --precision bf16 [--compile] [--plain-prompts]
    python benchmarks/rl_throughput.py --model models/base-v1 --precision bf16 --kl-coef 0.1   # the demo's KL
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETTINGS = {  # per preset: prompts per step, group size, completion tokens
    "tiny": {"prompts_per_step": 8, "group_size": 8, "max_tokens": 32},
    "50m": {"prompts_per_step": 8, "group_size": 8, "max_tokens": 96},
    "model": {"prompts_per_step": 16, "group_size": 8, "max_tokens": 256},  # --model: the demo's step
}


def environment():
    from actors.settings import small_maps

    return small_maps(100)


def ours(
    model: str,
    run_dir: str,
    shape: dict,
    steps: int,
    overlap: bool,
    threads: int,
    precision: str,
    compile: bool,
    shared_prompts: bool = True,
    kl_coef: float = 0.0,
) -> dict:
    import ray

    from actors.settings import TrainConfig
    from actors.trainer import Trainer
    from cli.training import connect_ray

    config = TrainConfig(
        run_dir=run_dir,
        model=model,
        env=environment(),
        serving={"max_model_len": 1024, "dtype": "bfloat16" if precision == "bf16" else "float32"},
        deepspeed={"precision": precision, "compile": compile},
        grpo=shape
        | {"steps_per_round": steps + 1, "learning_rate": 1e-6, "drop_zero_variance": False, "overlap": overlap}
        | {"shared_prompts": shared_prompts, "kl_coef": kl_coef}
        | {"micro_batch_size": shape["prompts_per_step"] * shape["group_size"] // 2},
        resources={"rollout_workers": 2, "learners": 1, "learner_threads": threads},
        checkpoint={"every_steps": 0, "keep": 1},
    )
    connect_ray(config.required_cpus())
    started = time.perf_counter()
    trainer = Trainer(config, deployment="bench")
    setup = time.perf_counter() - started
    try:
        records = trainer.train_round(0, config.env)[1:]  # the first step warms up
    finally:
        trainer.shutdown()
        ray.shutdown()
    walls = [r["time"]["wall"] for r in records]
    samples = sum(r["samples"] for r in records)
    trained = [r["train"]["forward_tokens"] for r in records]  # every row trains (all groups kept)
    parts = ("sample", "generate", "score", "train", "sync", "ray_overhead")
    return {
        "setup_s": setup,
        "seconds_per_step": statistics.mean(walls),
        "samples_per_s": samples / sum(walls),
        "breakdown": {p: statistics.mean(r["time"][p] for r in records) for p in parts},
        "tokens_per_s": statistics.mean(r["tokens_per_s"] for r in records),
        "response_tokens_per_sample": sum(r["response_tokens"] for r in records) / samples,
        "generated_tokens_per_step": statistics.mean(r["response_tokens"] for r in records),
        "trained_tokens_per_step": statistics.mean(trained),
    }


def trl(model: str, shape: dict, steps: int, threads: int, precision: str, kl_coef: float = 0.0) -> dict:
    from benchmarks.trl_peer import run_trl_grpo
    from env.generator import generate
    from env.prompt import render_prompt

    instances, _ = generate(environment(), "bench")
    return run_trl_grpo(
        model,
        [render_prompt(i) for i in instances],
        instances,
        shape["group_size"],
        shape["prompts_per_step"],
        shape["max_tokens"],
        steps,
        threads=threads,
        out_dir=tempfile.mkdtemp(prefix="trl-"),
        bf16=precision == "bf16",
        beta=kl_coef,
    )


def count_parameters(model: str) -> int:
    import math

    from safetensors import safe_open

    with safe_open(str(Path(model) / "model.safetensors"), "np") as handle:
        return sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())


def main() -> None:
    from serving.model import PRESETS, init_model

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["tiny", "50m"], choices=sorted(PRESETS))
    parser.add_argument("--steps", type=int, default=4, help="timed steps (after one warm-up step)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the learner and of TRL")
    parser.add_argument("--overlap", action="store_true", help="ours: generate step t+1 while training step t")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="both sides (bf16: mixed)")
    parser.add_argument("--model", help="a model folder (e.g. models/base-v1) instead of the presets")
    parser.add_argument("--compile", action="store_true", help="ours: torch.compile the learner's model")
    parser.add_argument("--plain-prompts", action="store_true", help="also ours with every sample's prompt computed")
    parser.add_argument("--kl-coef", type=float, default=0.0, help="both sides: KL to a frozen reference (TRL's beta)")
    args = parser.parse_args()
    from benchmarks.peak import matmul_peak_gflops

    peak = matmul_peak_gflops()
    print(f"bf16 matmul peak: {peak:,.0f} GFLOP/s")
    results = {}
    for preset in [args.model] if args.model else args.presets:
        shape = SETTINGS["model" if args.model else preset]
        with tempfile.TemporaryDirectory() as folder:
            model = args.model or str(init_model(Path(folder) / preset, PRESETS[preset]))
            run = str(Path(folder) / "run")
            settings = (shape, args.steps, args.overlap, args.threads, args.precision, args.compile)
            mine = ours(model, run, *settings, kl_coef=args.kl_coef)
            plain = None
            if args.plain_prompts:
                plain = ours(model, run + "-plain", *settings, shared_prompts=False, kl_coef=args.kl_coef)
            peer = trl(model, shape, args.steps, args.threads, args.precision, args.kl_coef)
            parameters = count_parameters(model)  # while a preset's folder exists
        for measured in filter(None, (mine, plain)):
            flops = 2 * parameters * measured["generated_tokens_per_step"]
            flops += (6 + (2 if args.kl_coef else 0)) * parameters * measured["trained_tokens_per_step"]  # + reference
            measured["mfu"] = flops / measured["seconds_per_step"] / (peak * 1e9)
        results[preset] = {"shape": shape, "ours": mine, "trl": peer, "parameters": parameters, "peak_gflops": peak}
        if plain:
            results[preset]["ours_plain_prompts"] = plain
        b = mine["breakdown"]
        print(f"\n== {preset} ({args.precision}): {shape}")
        print(f"ours: {mine['samples_per_s']:.1f} samples/s, {mine['seconds_per_step']:.2f} s/step")
        print(f"TRL:  {peer['samples_per_s']:.1f} samples/s, {peer['seconds_per_step']:.2f} s/step")
        print(f"ratio ours/TRL (samples/s): {mine['samples_per_s'] / peer['samples_per_s']:.2f}x")
        print("our step: " + ", ".join(f"{k} {v:.3f} s" for k, v in b.items()))
        step = mine["seconds_per_step"]
        print(f"weight sync {b['sync'] / step:.1%} of the step; Ray overhead {b['ray_overhead'] / step:.1%}")
        print(f"our step's MFU: {mine['mfu']:.2%} ({parameters / 1e6:.1f}M parameters, "
              f"{mine['generated_tokens_per_step']:.0f} generated + {mine['trained_tokens_per_step']:.0f} trained "
              "tokens a step)")  # fmt: skip
        if plain:
            print(f"ours, every prompt computed: {plain['samples_per_s']:.1f} samples/s, "
                  f"{plain['seconds_per_step']:.2f} s/step, train {plain['breakdown']['train']:.3f} s, "
                  f"{plain['trained_tokens_per_step']:.0f} trained tokens a step; shared/plain "
                  f"{mine['samples_per_s'] / plain['samples_per_s']:.2f}x")  # fmt: skip
        if peer.get("generate_s") is not None:
            generate, rest = peer["generate_s"] / peer["steps"], peer["train_s"] / peer["steps"]
            print(f"TRL step: generate+score {generate:.3f} s, rest {rest:.3f} s")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
