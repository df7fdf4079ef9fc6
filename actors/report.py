"""The run report: plots of a run directory and ``report.md`` embedding them with the final table."""

from __future__ import annotations

from pathlib import Path

from actors.metrics import read_metrics
from actors.run_dir import RoundDir, RunDir, read_json
from env.config import load_config
from env.evaluate import FAILURE_CATEGORIES
from env.markdown import md_head, md_row
from env.stats import FailureTable


def plot_validation(rounds: list[RoundDir], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for r in rounds:
        k = r.index
        table = FailureTable.from_dict(read_json(r.validation)["table"])
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


def config_profile(sizes: dict) -> dict[str, float]:
    """A config's shape from its ``sizes`` mapping (size -> knobs as dicts): data share on maps up to 5x5,
    data-weighted hole and WAIT ratios, sizes in use."""
    used = {int(size): knobs for size, knobs in sizes.items() if knobs["data_ratio"] > 0}
    total = sum(k["data_ratio"] for k in used.values()) or 1.0
    return {
        "small": sum(k["data_ratio"] for size, k in used.items() if size <= 5) / total,
        "hole": sum(k["data_ratio"] * k["hole_ratio"] for k in used.values()) / total,
        "wait": sum(k["data_ratio"] * k["wait_ratio"] for k in used.values()) / total,
        "sizes": len(used),
    }


def config_sizes(path: Path) -> dict[int, dict]:
    """A round's ``env_config.yaml`` as its ``sizes`` mapping, size -> knobs as dicts."""
    return {size: knobs.model_dump() for size, knobs in load_config(path).sizes.items()}


def plot_config_evolution(panels: dict[str, list[RunDir]], path: Path) -> None:
    """One column per panel (a run, or a sweep variant's seeds): per round, the data share of each map size
    (stacked bars) and the data-weighted hole and WAIT ratios, each a mean over the panel's runs."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(panels), figsize=(3.4 * len(panels) + 1, 6), sharey="row", squeeze=False)
    colours = plt.get_cmap("viridis")
    for column, (title, runs) in enumerate(panels.items()):
        by_round: dict[int, list[dict]] = {}  # round -> the runs' size mappings
        for run in runs:
            for r in run.rounds():
                if r.env_config.exists():
                    by_round.setdefault(r.index, []).append(config_sizes(r.env_config))
        rounds = sorted(by_round)
        top, bottom_axis = axes[0][column], axes[1][column]
        bottom = [0.0] * len(rounds)
        for size in range(3, 11):
            heights = [sum(m[size]["data_ratio"] for m in by_round[k] if size in m) / len(by_round[k]) for k in rounds]
            top.bar(rounds, heights, bottom=bottom, color=colours((size - 3) / 7), label=f"{size}x{size}")
            bottom = [b + h for b, h in zip(bottom, heights)]
        for knob, label in (("hole", "hole ratio"), ("wait", "WAIT ratio")):
            means = [sum(config_profile(m)[knob] for m in by_round[k]) / len(by_round[k]) for k in rounds]
            bottom_axis.plot(rounds, means, marker="o", label=label)
        top.set(title=title, xticks=rounds)
        bottom_axis.set(xlabel="round", xticks=rounds, ylim=(0, 1))
    axes[0][0].set_ylabel("data ratio by map size")
    axes[1][0].set_ylabel("data-weighted ratio")
    for row in axes:  # the legend of the first panel (a later one may have no rounds yet), beside the last
        row[-1].legend(
            *row[0].get_legend_handles_labels(), fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5)
        )
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_failures(rounds: list[RoundDir], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    summaries = [read_json(r.validation)["summary"] for r in rounds]
    rounds = [r.index for r in rounds]
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


def plot_reward(metrics: Path, path: Path) -> None:
    import matplotlib.pyplot as plt

    records = read_metrics(metrics)
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
    run = RunDir(out)
    run.plots.mkdir(exist_ok=True)
    rounds = run.rounds(validated=True)
    lines = [f"# Run report: {run.path.name}", ""]
    if rounds:
        plot_validation(rounds, run.plots / "validation_by_size.png")
        plot_config_evolution({run.path.name: [run]}, run.plots / "config_evolution.png")
        plot_failures(rounds, run.plots / "failures.png")
        lines += md_head(["round", "valid", "optimal", "engineer changes"])
        for r in rounds:
            summary = read_json(r.validation)["summary"]
            changes = "-"
            if r.decision.exists():
                made = read_json(r.decision)
                changes = "; ".join(made["changes"]) or "none"
                if made.get("fallback"):
                    changes = f"none: {made['fallback']} ({'; '.join(made.get('notes') or [])[:200]})"
            if r.undone():
                changes = f"round undone (below the start's validation); {changes}"
            rates = [f"{summary['valid_rate']:.1%}", f"{summary['optimal_rate']:.1%}"]
            lines.append(md_row([str(r.index), *rates, changes]))
        lines += ["", "![validation](plots/validation_by_size.png)", "![configs](plots/config_evolution.png)"]
        lines += ["![failures](plots/failures.png)"]
    if run.metrics.exists():
        plot_reward(run.metrics, run.plots / "reward.png")
        lines += ["![reward](plots/reward.png)"]
    if run.start.validation.exists():
        summary = read_json(run.start.validation)["summary"]
        lines += ["", f"Before RL (the starting policy): validation valid {summary['valid_rate']:.1%}, "
                  f"optimal {summary['optimal_rate']:.1%}."]  # fmt: skip
    tables = [("Before RL (the starting policy)", run.start.benchmark), ("After RL", run.benchmark)]
    tables = [(title, path) for title, path in tables if path.exists()]
    if tables:
        lines += ["", "## Benchmark (acc./opt. in %, Sum = mean over sizes)"]
        for title, path in tables:
            lines += ["", f"**{title}**", "", read_json(path)["markdown"]]
    if run.provenance.exists():
        lines += ["", "## Provenance", ""] + provenance_lines(run.provenance)
    run.report.write_text("\n".join(lines) + "\n")
    return run.report


def provenance_lines(path: Path) -> list[str]:
    """One line per start or resume of the run: the step it started from, the code's commit, the libraries and
    the driver's machine (``provenance.jsonl``)."""
    lines = []
    for record in read_metrics(path):
        code = record["code"]
        commit = code["commit"][:12] if code["commit"] else "not a git checkout"
        commit += " (with uncommitted changes)" if code["dirty"] else ""
        packages = ", ".join(f"{name} {version}" for name, version in record["packages"].items() if version)
        machine = record["machine"]
        lines.append(f"- from step {record['from_step']} ({record['time']}): code {commit}; {packages}; "
                     f"{machine['cpu']} x{machine['cpus']}, bf16 native: {machine['cpu_native_bf16']}")  # fmt: skip
    return lines
