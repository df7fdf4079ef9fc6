"""Trials of several sweeps side by side: what the runs that lift the base have in common.

Reads each sweep folder's ``summary.csv`` (written by ``tune.summary``; runs nothing) and lists every finished
trial with its benchmark change against its own sweep's starting policy (the ``before RL`` row) beside what
its training looked like: the rollouts' valid rate and the share of groups with signal in round 0 (before
GRPO changed the policy, so a property of the configuration) and over all rounds, and the rounds the
validation guard undid. Then the rank correlation (Spearman) of the 3-agent change with each of them.

    python -m tune.across docs/results/sweep-grpo-guard-12 docs/results/sweep-grpo-guard-12-random [--out F.md]
"""

from __future__ import annotations

import argparse
import ast
import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from env.markdown import md_head, md_row
from tune.summary import START

AGENTS = (3, 4, 5)


@dataclass
class Trial:
    sweep: str
    variant: str
    seed: str
    gain: dict[int, float]  # agent count -> benchmark acc. Sum change against the sweep's start, points
    rounds: int  # rounds trained
    valid_r0: float  # rollouts' valid rate in round 0, %
    signal_r0: float  # share of groups with signal in round 0, %
    signal_mean: float  # the same, mean over rounds, %
    undone: int  # rounds the guard undid
    precision: str


def _number(row: dict[str, str], key: str) -> float | None:
    return float(row[key]) if row.get(key) else None


def read_trials(folder: Path) -> list[Trial]:
    """The finished trials of one sweep folder, each against the folder's starting policy."""
    with (folder / "summary.csv").open() as file:
        rows = list(csv.DictReader(file))
    start = next((row for row in rows if row["variant"] == START), None)
    if start is None:
        raise ValueError(f"{folder}/summary.csv has no '{START}' row to compare against")
    base = {a: value for a in AGENTS if (value := _number(start, f"acc_sum_{a}")) is not None}
    trials = []
    for row in rows:
        if row["variant"] == START or row["status"] != "done" or _number(row, "rollout_signal_r0") is None:
            continue
        signal = [float(v) for k, v in row.items() if k.startswith("rollout_signal_r") and v]
        mine = {a: value for a in base if (value := _number(row, f"acc_sum_{a}")) is not None}
        trials.append(
            Trial(
                sweep=folder.name,
                variant=row["variant"],
                seed=row["seed"],
                gain={a: 100 * (value - base[a]) for a, value in mine.items()},
                rounds=len(signal),
                valid_r0=100 * float(row["rollout_valid_r0"]),
                signal_r0=100 * float(row["rollout_signal_r0"]),
                signal_mean=100 * statistics.mean(signal),
                undone=len(ast.literal_eval(row["undone"])) if row.get("undone") else 0,
                precision=row.get("precision") or "-",
            )
        )
    return trials


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i : j + 1]:
            result[k] = (i + j) / 2 + 1
        i = j + 1
    return result


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rank correlation; None where either side is constant."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return statistics.correlation(ranks(x), ranks(y))


def to_markdown(trials: list[Trial]) -> str:
    trials = sorted(trials, key=lambda t: -t.gain.get(3, 0.0))
    head = ["sweep", "variant", "seed", *(f"{a} agents" for a in AGENTS), "rounds", "rollouts valid r0"]
    head += ["groups with signal r0", "groups with signal, all rounds", "rounds undone", "precision"]
    lines = ["Benchmark acc. Sum change against each sweep's starting policy (points); rates in %.", ""]
    lines += md_head(head)
    for t in trials:
        gains = [f"{t.gain[a]:+.1f}" if a in t.gain else "-" for a in AGENTS]
        cells = [t.sweep, t.variant, t.seed, *gains, str(t.rounds), f"{t.valid_r0:.0f}", f"{t.signal_r0:.0f}"]
        lines.append(md_row(cells + [f"{t.signal_mean:.0f}", str(t.undone), t.precision]))
    scored = [t for t in trials if 3 in t.gain]
    if len(scored) > 2:
        gain = [t.gain[3] for t in scored]
        columns = {
            "rollouts valid r0": [t.valid_r0 for t in scored],
            "groups with signal r0": [t.signal_r0 for t in scored],
            "groups with signal, all rounds": [t.signal_mean for t in scored],
            "rounds undone": [float(t.undone) for t in scored],
        }
        rhos = [spearman(values, gain) for values in columns.values()]
        lines += ["", f"Spearman rank correlation with the 3-agent change ({len(scored)} trials):", ""]
        lines += [*md_head(list(columns)), md_row(["-" if rho is None else f"{rho:+.2f}" for rho in rhos])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Trials of several sweeps side by side (reads summary.csv files).")
    parser.add_argument("folders", nargs="+", type=Path, help="sweep folders, each with a summary.csv")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    text = to_markdown([trial for folder in args.folders for trial in read_trials(folder)])
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
