"""The run report: plots of a run directory and ``report.md`` embedding them with the final table."""

from __future__ import annotations

import json
from pathlib import Path

from actors.metrics import read_metrics
from env.config import load_config
from env.evaluate import FAILURE_CATEGORIES
from env.stats import FailureTable


def _rounds(out: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in out.glob("round_*") if (p / "validation.json").exists())


def plot_validation(out: Path, rounds: list[int], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for k in rounds:
        table = FailureTable.from_dict(json.loads((out / f"round_{k}" / "validation.json").read_text())["table"])
        by_size = table.by("size")
        sizes = sorted(by_size)
        axes[0].plot(sizes, [by_size[s].valid / by_size[s].total for s in sizes], marker="o", label=f"round {k}")
        axes[1].plot(sizes, [by_size[s].optimal / by_size[s].total for s in sizes], marker="o", label=f"round {k}")
    for axis, title in zip(axes, ("valid rate", "optimal rate")):
        axis.set(title=f"validation {title} by map size", xlabel="map size")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_configs(out: Path, rounds: list[int], path: Path) -> None:
    import matplotlib.pyplot as plt

    configs = [load_config(out / f"round_{k}" / "env_config.yaml") for k in rounds]
    sizes = sorted({s for c in configs for s in c.sizes})
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    bottom = [0.0] * len(rounds)
    for size in sizes:
        shares = [c.sizes[size].data_ratio if size in c.sizes else 0.0 for c in configs]
        axes[0].bar(rounds, shares, bottom=bottom, label=f"{size}x{size}")
        bottom = [b + s for b, s in zip(bottom, shares)]
    axes[0].set(title="data_ratio by size", xlabel="round")
    axes[0].legend(fontsize=7)
    for axis, knob in zip(axes[1:], ("hole_ratio", "wait_ratio")):
        for size in sizes:
            values = [getattr(c.sizes[size], knob) if size in c.sizes else None for c in configs]
            axis.plot(rounds, values, marker="o", label=f"{size}x{size}")
        axis.set(title=knob, xlabel="round")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_failures(out: Path, rounds: list[int], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    summaries = [json.loads((out / f"round_{k}" / "validation.json").read_text())["summary"] for k in rounds]
    bottom = [0.0] * len(rounds)
    for category in FAILURE_CATEGORIES:
        shares = [s["failures"][category] for s in summaries]
        axis.bar(rounds, shares, bottom=bottom, label=category)
        bottom = [b + s for b, s in zip(bottom, shares)]
    axis.set(title="validation failures (share of answers)", xlabel="round")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_reward(out: Path, path: Path) -> None:
    import matplotlib.pyplot as plt

    records = read_metrics(out / "metrics.jsonl")
    figure, axis = plt.subplots(figsize=(7, 4))
    steps = [r["global_step"] for r in records]
    axis.plot(steps, [r["reward_mean"] for r in records], label="mean reward")
    axis.plot(steps, [r["valid_rate"] for r in records], label="valid rate")
    axis.set(title="rollouts", xlabel="GRPO step")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write_report(out: str | Path) -> Path:
    """Write ``plots/*.png`` and ``report.md`` from the files of a run directory."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out)
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    rounds = _rounds(out)
    lines = [f"# Run report: {out.name}", ""]
    if rounds:
        plot_validation(out, rounds, plots / "validation_by_size.png")
        plot_configs(out, rounds, plots / "config_evolution.png")
        plot_failures(out, rounds, plots / "failures.png")
        lines += ["| round | valid | optimal | engineer changes |", "|---|---|---|---|"]
        for k in rounds:
            summary = json.loads((out / f"round_{k}" / "validation.json").read_text())["summary"]
            decision = out / f"round_{k}" / "engineer" / "decision.json"
            changes = "-"
            if decision.exists():
                made = json.loads(decision.read_text())
                changes = "; ".join(made["changes"]) or "none"
                if made.get("fallback"):
                    changes = f"none: {made['fallback']} ({'; '.join(made.get('notes') or [])[:200]})"
            lines.append(f"| {k} | {summary['valid_rate']:.1%} | {summary['optimal_rate']:.1%} | {changes} |")
        lines += ["", "![validation](plots/validation_by_size.png)", "![configs](plots/config_evolution.png)"]
        lines += ["![failures](plots/failures.png)"]
    if (out / "metrics.jsonl").exists():
        plot_reward(out, plots / "reward.png")
        lines += ["![reward](plots/reward.png)"]
    start = out / "start"
    if (start / "validation.json").exists():
        summary = json.loads((start / "validation.json").read_text())["summary"]
        lines += ["", f"Before RL (the starting policy): validation valid {summary['valid_rate']:.1%}, "
                  f"optimal {summary['optimal_rate']:.1%}."]  # fmt: skip
    benchmark = out / "final" / "benchmark.json"
    tables = [("Before RL (the starting policy)", start / "final" / "benchmark.json"), ("After RL", benchmark)]
    tables = [(title, path) for title, path in tables if path.exists()]
    if tables:
        lines += ["", "## Benchmark (acc./opt. in %, Sum = mean over sizes)"]
        for title, path in tables:
            lines += ["", f"**{title}**", "", json.loads(path.read_text())["markdown"]]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
