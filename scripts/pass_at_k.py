"""How much a policy's sampled answers know that its greedy answer does not: greedy accuracy, mean sampled
accuracy and pass@k (at least one of k samples valid) per map size, at several temperatures, on a suite slice.

A diagnostic for GRPO (docs/results.md): GRPO can only lift greedy accuracy where some samples already succeed.
Uses vLLM's offline engine directly (bf16, seeded), not the deployment.

    python scripts/pass_at_k.py --model models/base-v1 --agents 3 --per-cell 10 [--k 8] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--per-cell", type=int, default=10)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.6])
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from serving.settings import ServingConfig

    os.environ.update(ServingConfig(model=args.model).cpu_environment())
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from actors.validation import suite_instances
    from env import task
    from env.benchmark import BENCHMARK, VALIDATION, parse_id

    suite = BENCHMARK if args.agents in BENCHMARK.agent_counts else VALIDATION
    instances = suite_instances(suite, [args.agents], args.per_cell)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = [
        tokenizer.apply_chat_template(task.messages(i), tokenize=False, add_generation_prompt=True) for i in instances
    ]
    llm = LLM(model=args.model, dtype="bfloat16", max_model_len=2048, seed=0, enable_chunked_prefill=False)
    settings = {"greedy": SamplingParams(n=1, temperature=0.0, max_tokens=args.max_tokens)}
    for t in args.temperatures:
        settings[f"T={t:g}"] = SamplingParams(n=args.k, temperature=t, max_tokens=args.max_tokens, seed=1)
    report = {"model": args.model, "agents": args.agents, "per_cell": args.per_cell, "instances": len(instances)}
    for name, sampling in settings.items():
        by_size = defaultdict(lambda: {"mean": 0.0, "any": 0, "n": 0})
        for instance, result in zip(instances, llm.generate(prompts, sampling, use_tqdm=False)):
            valid = [task.judge(instance, out.text).valid for out in result.outputs]
            cell = by_size[parse_id(instance.id)["size"]]
            cell["mean"] += sum(valid) / len(valid)
            cell["any"] += any(valid)
            cell["n"] += 1
        n = len(instances)
        report[name] = {
            "mean_valid": 100 * sum(c["mean"] for c in by_size.values()) / n,
            f"pass@{sampling.n}": 100 * sum(c["any"] for c in by_size.values()) / n,
            "by_size": {
                s: {"mean_valid": 100 * c["mean"] / c["n"], "pass": 100 * c["any"] / c["n"]}
                for s, c in sorted(by_size.items())
            },
        }
        row = report[name]
        print(
            f"{name}: mean valid {row['mean_valid']:.1f}%, pass@{sampling.n} {row[f'pass@{sampling.n}']:.1f}%",
            flush=True,
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
