"""Measured per-token costs of a run or a sweep, from its ``metrics.jsonl`` files: the figures
docs/scaling.md scales to paper size.

    python -m tune.costs runs/study-small [runs/cpu-demo ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def step_rows(root: Path) -> list[dict]:
    """Every GRPO step logged under ``root`` (one run folder, or a sweep's ``runs/*``)."""
    return [json.loads(line) for path in sorted(root.rglob("metrics.jsonl")) for line in path.open()]


def per_token_costs(rows: list[dict]) -> dict[str, float]:
    """Totals over the steps: generation and training seconds per token, and the step's other parts."""
    generated = sum(r["response_tokens"] for r in rows)
    trained = sum(r["train"].get("train_tokens", 0) for r in rows)
    seconds = {part: sum(r["time"][part] for r in rows) for part in ("generate", "train", "sync", "wall")}
    return {
        "steps": len(rows),
        "samples_per_step": statistics.mean(r["samples"] for r in rows),
        "generated_tokens_per_sample": generated / sum(r["samples"] for r in rows),
        "generate_ms_per_token": 1000 * seconds["generate"] / generated,
        "trained_tokens_per_step": trained / len(rows),
        "train_ms_per_token": 1000 * seconds["train"] / max(trained, 1),
        "sync_s_per_step": seconds["sync"] / len(rows),
        "step_s": seconds["wall"] / len(rows),
        "generate_share_of_step": seconds["generate"] / seconds["wall"],
    }


def main(paths: list[str]) -> None:
    for path in paths:
        costs = per_token_costs(step_rows(Path(path)))
        print(f"{path}: " + ", ".join(f"{k} {v:.4g}" for k, v in costs.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
