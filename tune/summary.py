"""A sweep's summary, read from its trials' run directories: one row per trial (final benchmark acc./opt.
Sum per agent count, validation valid/optimal rate per round), a mean +- std table per variant, as
markdown and CSV, a plot comparing the variants, the paper's per-size benchmark table per variant (mean
over seeds) and the configurations' evolution by round.

    python -m tune.summary configs/study-small.yaml runs/study-small [--variants fixed plr --name part]
"""

from __future__ import annotations

import argparse
import copy
import csv
import statistics
from pathlib import Path
from typing import Any

from actors.engineer_probe import PROBE_REVISED
from actors.metrics import read_metrics
from actors.report import config_profile, config_sizes, plot_config_evolution
from actors.run_dir import RunDir, benchmark_sums, read_json, validation_rates
from env.markdown import md_head, md_row, size_table
from tune.spec import Sweep, shared_start, trial_dir

START = "before RL"  # the row of the shared starting policy (``shared/start``, see actors.job.score_start)


def variant_runs(out: Path, sweep: Sweep) -> dict[str, list[RunDir]]:
    """Each variant's trial run folders, one per seed."""
    return {v: [trial_dir(out, v, seed) for seed in sweep.settings.seeds] for v in sweep.settings.variants}


def _validation(report: Path, k: int | str) -> dict[str, float]:
    rates = validation_rates(report)
    return {} if rates is None else {f"valid_r{k}": rates[0], f"optimal_r{k}": rates[1]}


def _benchmark(run: RunDir) -> dict[str, Any]:
    row: dict[str, Any] = {"status": "done" if run.benchmark.exists() else "incomplete"}
    for agents, sums in benchmark_sums(run.benchmark).items():
        row[f"acc_sum_{agents}"] = sums["acc"] / 100  # the table is in %; rows hold fractions
        row[f"opt_sum_{agents}"] = sums["opt"] / 100
    return row


def trial_row(run: RunDir, variant: str, seed: int) -> dict[str, Any]:
    """A trial's figures from its run directory (what is missing is left out)."""
    row: dict[str, Any] = {"variant": variant, "seed": seed}
    for r in run.rounds():
        row |= _validation(r.validation, r.index)
    if run.learner.exists():  # the learners' resolved precision; runs from before learner.jsonl have none
        row["precision"] = run.precision()
    if run.provenance.exists():  # the code of each start or resume; `*`: with uncommitted changes
        row["code"] = run.code()
    if any(r.guard.exists() for r in run.rounds()):  # revert_below_start: the rounds the guard undid
        row["undone"] = [r.index for r in run.rounds() if r.undone()]
    steps = read_metrics(run.metrics) if run.metrics.exists() else []
    for k in sorted({step["round"] for step in steps}):  # the rollouts' valid rate: the training signal
        mine = [step for step in steps if step["round"] == k]
        row[f"rollout_valid_r{k}"] = statistics.mean(step["valid_rate"] for step in mine)
        signal = [step["train"]["signal_share"] for step in mine if "signal_share" in step.get("train", {})]
        if signal:  # the share of drawn groups whose samples' rewards differ: the learning band
            row[f"rollout_signal_r{k}"] = statistics.mean(signal)
    return row | _benchmark(run)


def collect(out: Path, sweep: Sweep) -> list[dict[str, Any]]:
    """One row per trial; first the starting policy's row when the sweep scored it, whose validation is
    also every trial's round -1 (they all start from it)."""
    start = shared_start(out)
    before = _validation(start.validation, -1)
    rows = [before | trial_row(trial_dir(out, v, s), v, s) for v, s in sweep.configs]
    if start.benchmark.exists():
        rows.insert(0, {"variant": START, "seed": "-"} | before | _benchmark(start))
    return rows


def _round(k: str) -> str:
    return START if k == "-1" else f"r{k}"


def _columns(rows: list[dict[str, Any]], prefix: str) -> list[str]:
    names = {key for row in rows for key in row if key.startswith(prefix)}
    return sorted(names, key=lambda n: int(n.rsplit("_", 1)[1].lstrip("r")))


def _pair(row: dict[str, Any], first: str, second: str) -> str:
    if first not in row:
        return "-"
    return f"{100 * row[first]:.1f}/{100 * row[second]:.1f}"


def mean_std(values: list[float], digits: int) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f}±{statistics.stdev(values):.{digits}f}"


def to_markdown(rows: list[dict[str, Any]]) -> str:
    sums = [c.removeprefix("acc_sum_") for c in _columns(rows, "acc_sum_")]
    rounds = [c.removeprefix("valid_r") for c in _columns(rows, "valid_r")]
    head = ["variant", "seed", "status"] + [f"{a} agents acc/opt Sum" for a in sums]
    head += [f"val. {_round(k)} valid/opt" for k in rounds]
    guarded = any("undone" in row for row in rows)
    head += ["rounds undone (below the start)"] if guarded else []
    precision = any("precision" in row for row in rows)
    head += ["precision"] if precision else []
    code = any("code" in row for row in rows)
    head += ["code"] if code else []
    lines = ["All figures in %.", "", *md_head(head)]
    for row in rows:
        cells = [row["variant"], str(row["seed"]), row["status"]]
        cells += [_pair(row, f"acc_sum_{a}", f"opt_sum_{a}") for a in sums]
        cells += [_pair(row, f"valid_r{k}", f"optimal_r{k}") for k in rounds]
        cells += [", ".join(f"r{k}" for k in row.get("undone", [])) or "-"] if guarded else []
        cells += [row.get("precision", "-")] if precision else []
        cells += [row.get("code", "-")] if code else []
        lines.append(md_row(cells))
    variants = list(dict.fromkeys(row["variant"] for row in rows))
    head = ["variant", "seeds done"] + [f"{a} agents acc Sum" for a in sums] + [f"{a} agents opt Sum" for a in sums]
    trained = [c.removeprefix("rollout_valid_r") for c in _columns(rows, "rollout_valid_r")]
    signal = [c.removeprefix("rollout_signal_r") for c in _columns(rows, "rollout_signal_r")]
    head += [f"val. {_round(k)} valid" for k in rounds] + [f"rollouts r{k} valid" for k in trained]
    head += [f"groups with signal r{k}" for k in signal]
    lines += ["", "Mean ± std over seeds:", "", *md_head(head)]
    for variant in variants:
        done = [r for r in rows if r["variant"] == variant and r["status"] == "done"]
        mine = [r for r in rows if r["variant"] == variant]
        cells = [variant, f"{len(done)}/{len(mine)}"]
        cells += [mean_std([100 * r[f"acc_sum_{a}"] for r in done], 1) for a in sums]
        cells += [mean_std([100 * r[f"opt_sum_{a}"] for r in done], 1) for a in sums]
        cells += [mean_std([100 * r[f"valid_r{k}"] for r in mine if f"valid_r{k}" in r], 1) for k in rounds]
        cells += [mean_std([100 * r[key] for r in mine if (key := f"rollout_valid_r{k}") in r], 1) for k in trained]
        cells += [mean_std([100 * r[key] for r in mine if (key := f"rollout_signal_r{k}") in r], 1) for k in signal]
        lines.append(md_row(cells))
    return "\n".join(lines) + "\n"


def _round_means(rows: list[dict[str, Any]], prefix: str, rounds: list[str]) -> tuple[list[int], list[float]]:
    """The rounds where some row has ``prefix<k>``, and the mean over those rows."""
    points = [(int(k), [r[f"{prefix}{k}"] for r in rows if f"{prefix}{k}" in r]) for k in rounds]
    return [k for k, v in points if v], [statistics.mean(v) for _, v in points if v]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Left: final benchmark acc. Sum per agent count (mean over seeds, std as error bars) per variant;
    middle: validation valid rate per round; right: the rollouts' valid rate per round (means over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(row["variant"] for row in rows))
    sums = [c.removeprefix("acc_sum_") for c in _columns(rows, "acc_sum_")]
    rounds = [c.removeprefix("valid_r") for c in _columns(rows, "valid_r")]
    trained = [c.removeprefix("rollout_valid_r") for c in _columns(rows, "rollout_valid_r")]
    figure, (bars, curves, rollouts) = plt.subplots(1, 3, figsize=(18, 4.5))
    width = 0.8 / max(len(variants), 1)
    for i, variant in enumerate(variants):
        mine = [r for r in rows if r["variant"] == variant]
        means, spreads = [], []
        for a in sums:
            values = [r[f"acc_sum_{a}"] for r in mine if f"acc_sum_{a}" in r]
            means.append(statistics.mean(values) if values else 0.0)
            spreads.append(statistics.stdev(values) if len(values) > 1 else 0.0)
        bars.bar([j + i * width for j in range(len(sums))], means, width, yerr=spreads, label=variant)
        curves.plot(*_round_means(mine, "valid_r", rounds), marker="o", label=variant)
        rollouts.plot(*_round_means(mine, "rollout_valid_r", trained), marker="o", label=variant)
    bars.set_xticks([j + 0.4 - width / 2 for j in range(len(sums))], [f"{a} agents" for a in sums])
    bars.set(title="benchmark acc. Sum (mean over seeds)", ylabel="accuracy")
    curves.set(title="validation valid rate by round", xlabel="round", ylabel="valid rate")
    curves.set_xticks([int(k) for k in rounds], [_round(k).removeprefix("r") for k in rounds])
    rollouts.set(title="rollout valid rate by round (training signal)", xlabel="round", ylabel="valid rate")
    rollouts.set_xticks([int(k) for k in trained])
    for axis in (bars, curves, rollouts):
        axis.set_ylim(bottom=0.0, top=max(axis.get_ylim()[1], 0.05))  # an all-zero panel still shows its scale
        axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def benchmark_tables(out: Path, sweep: Sweep) -> str:
    """The paper's table per variant: acc./opt. (%) per map size and agent count, mean over the finished
    seeds; the Sum column (mean over sizes) also gives the std over seeds."""
    groups = {START: [shared_start(out)]} | variant_runs(out, sweep)
    lines = []
    for variant, runs in groups.items():
        tables = [read_json(run.benchmark)["table"] for run in runs if run.benchmark.exists()]
        if not tables:
            continue
        sizes = sorted({int(size) for table in tables for row in table.values() for size in row["sizes"]})
        lines += [f"**{variant}** ({len(tables)} {'seeds' if variant != START else 'model'}; acc./opt. in %)", ""]
        rows = []
        for agents in tables[0]:
            cells = []
            for size in sizes:
                found = [t[agents]["sizes"][str(size)] for t in tables if str(size) in t[agents]["sizes"]]
                mean = {key: statistics.mean(f[key] for f in found) for key in ("acc", "opt")} if found else None
                cells.append(f"{mean['acc']:.1f}/{mean['opt']:.1f}" if mean else "-")
            sums = {key: [t[agents]["sum"][key] for t in tables] for key in ("acc", "opt")}  # already in %
            rows.append((str(agents), cells, f"{mean_std(sums['acc'], 1)}/{mean_std(sums['opt'], 1)}"))
        lines += [*size_table(sizes, rows), ""]
    return "\n".join(lines)


def engineer_table(out: Path, sweep: Sweep) -> str:
    """Per variant, over its seeds and rounds: what the engineer decided (how often it changed the config,
    kept it, or had its answer projected) and the shape of the configs it produced (mean)."""
    head = ["variant", "decisions", "changed", "kept (fallback)", "projected"]
    head += ["data on <=5x5", "hole ratio", "wait ratio", "sizes used", "probe: flagged / revised / in band after"]
    lines = md_head(head)
    for variant in sweep.settings.variants:
        runs = variant_runs(out, sweep)[variant]
        decisions = [r.decision for run in runs for r in run.rounds() if r.decision.exists()]
        if not decisions:
            continue
        made = [read_json(path) for path in decisions]
        profiles = [config_profile(d["config"]["sizes"]) for d in made]
        mean = {key: statistics.mean(p[key] for p in profiles) for key in profiles[0]}
        cells = [variant, str(len(made)), str(sum(bool(d["changes"]) for d in made))]
        cells += [
            str(sum(d["fallback"] is not None for d in made)),
            str(sum(any(_projection(n) for n in d["notes"]) for d in made)),
        ]
        cells += [f"{mean['small']:.2f}", f"{mean['hole']:.2f}", f"{mean['wait']:.2f}", f"{mean['sizes']:.1f}"]
        cells.append(_probe_counts(made))
        lines.append(md_row(cells))
    return "\n".join(lines) + "\n"


def _projection(note: str) -> bool:
    """Whether a decision's note is the projection's (not the probe's, the level buffer's or a baseline's
    evidence)."""
    return not note.startswith(("probe:", "plr-levels:", "evidence:"))


def _probe_counts(decisions: list[dict]) -> str:
    """With engineer.probe: how many proposals the probe flagged, how many of those the engineer revised
    itself (not the mechanical drop), and how many ended with every size in the learning band."""
    probed = [d for d in decisions if d.get("probes")]
    if not probed:
        return "-"
    flagged = [d for d in probed if d["probes"][0]["flagged"]]
    revised = sum(PROBE_REVISED in d["notes"] for d in flagged)
    in_band = sum(not d["probes"][-1]["flagged"] for d in flagged)
    return f"{len(flagged)} of {len(probed)} / {revised} / {in_band}"


def describe_config(sizes: dict) -> str:
    """A configuration in a few words: the sizes with data (share in %), the data-weighted hole and WAIT
    ratios; ``all 8 sizes`` when every size has data."""
    used = {int(s): k for s, k in sizes.items() if k["data_ratio"] > 0}
    total = sum(k["data_ratio"] for k in used.values()) or 1.0
    shape = config_profile(sizes)
    where = (
        f"all {len(used)} sizes"
        if len(used) == 8
        else " ".join(f"{s}x{s}:{100 * used[s]['data_ratio'] / total:.0f}%" for s in sorted(used))
    )
    return f"{where}, holes {shape['hole']:.2f}, WAIT {shape['wait']:.2f}"


def proposals_table(out: Path, sweep: Sweep) -> str:
    """What each engineer made of the configuration, round by round, per seed (the round's env_config)."""
    runs = variant_runs(out, sweep)
    rounds = sorted({r.index for seeds in runs.values() for run in seeds for r in run.rounds()})
    lines = md_head(["variant", "seed", *(f"round {k}" for k in rounds)])
    for variant, seeds in runs.items():
        for seed, run in zip(sweep.settings.seeds, seeds):
            configs = {r.index: r.env_config for r in run.rounds() if r.env_config.exists()}
            if configs:
                cells = [describe_config(config_sizes(configs[k])) if k in configs else "-" for k in rounds]
                lines.append(md_row([variant, str(seed), *cells]))
    return "\n".join(lines) + "\n"


def write_summary(out: Path, sweep: Sweep, name: str = "summary") -> Path:
    """Write ``<name>.md``, ``<name>.csv``, ``<name>.png`` and ``<name>_configs.png`` in ``out``; returns
    the markdown's path."""
    rows = collect(out, sweep)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with (out / f"{name}.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out / f"{name}.png")
    plot_config_evolution(variant_runs(out, sweep), out / f"{name}_configs.png")
    text = "# Sweep summary\n\n" + to_markdown(rows) + f"\n![variants]({name}.png)\n"
    text += "\n## Benchmark per map size\n\n" + benchmark_tables(out, sweep)
    text += f"\n## Configurations by round\n\n![configs]({name}_configs.png)\n"
    text += "\n## Engineer decisions (all rounds and seeds; config shape means)\n\n" + engineer_table(out, sweep)
    text += "\n## Configurations by round and seed\n\n" + proposals_table(out, sweep)
    (out / f"{name}.md").write_text(text)
    return out / f"{name}.md"


def only(sweep: Sweep, variants: list[str]) -> Sweep:
    """The sweep restricted to some of its variants (in the order given)."""
    unknown = set(variants) - set(sweep.settings.variants)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; the sweep has {list(sweep.settings.variants)}")
    part = copy.copy(sweep)
    part.settings = sweep.settings.model_copy(update={"variants": {v: sweep.settings.variants[v] for v in variants}})
    part.configs = {(v, s): sweep.configs[v, s] for v in variants for s in sweep.settings.seeds}
    return part


def main(argv: list[str] | None = None) -> None:
    from tune.spec import load_sweep

    parser = argparse.ArgumentParser(description="Write a sweep's summary from its run folders (runs nothing).")
    parser.add_argument("sweep", help="the sweep YAML")
    parser.add_argument("out", type=Path, help="the sweep's --out folder")
    parser.add_argument("--variants", nargs="+", help="only these variants (default: all)")
    parser.add_argument("--name", default="summary", help="file name stem: NAME.md, .csv, .png, _configs.png")
    args = parser.parse_args(argv)
    sweep = load_sweep(args.sweep)
    print(write_summary(args.out, only(sweep, args.variants) if args.variants else sweep, args.name))


if __name__ == "__main__":
    main()
