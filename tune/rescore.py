"""A sweep's policies scored again on a larger share of the benchmark than its trials used (the trials score
the first ``benchmark.per_cell`` instances of each cell; the full suite has 50): the starting policy and each
finished trial's final policy (``actors.checkpoint.final_model``), greedy, through a Serve deployment with the
sweep's serving settings. One record a policy, ``<run>/rescore/<name>.json`` (the paper's table and the ids
of the instances it solved, valid and optimal), and ``<out>/<name>.md``: each trial beside the start, the
instances each trial gained and lost against the start (paired, per agent count), and mean ± std per
variant.

    python -m tune.rescore configs/sweep-grpo-kl.yaml runs/sweep-grpo-kl --name full-benchmark

A policy whose record exists is not scored again, so a run resumes where it stopped and the summary can be
rewritten from committed records alone (checkpoints are needed only for what is missing).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from actors.run_dir import RunDir, read_json
from env.benchmark import BENCHMARK, HOLE_LEVELS, score
from env.compare import cell_ids, gained_lost, mcnemar_p, solved_ids
from env.instance import Instance
from env.markdown import md_head, md_row
from tune.spec import Sweep, load_sweep, shared_start, trial_dir
from tune.summary import START, mean_std


def record_path(run: RunDir, name: str) -> Path:
    return run.path / "rescore" / f"{name}.json"


def policies(out: Path, sweep: Sweep) -> list[tuple[str, str, RunDir]]:
    """(variant, seed, run folder) of the starting policy (``shared/start``) and of every trial."""
    return [(START, "-", shared_start(out))] + [(v, str(s), trial_dir(out, v, s)) for v, s in sweep.configs]


def model_of(out: Path, sweep: Sweep, variant: str, run: RunDir) -> str | None:
    """The policy to score: the one every trial started from, or a finished trial's final policy (None for
    an unfinished trial)."""
    from actors.checkpoint import final_model
    from actors.job import prepare_model
    from tune.sweep import starting_policy

    if variant == START:
        base = sweep.base_config()
        shared = prepare_model(base, out / "shared", print) if sweep.settings.shared_warm_start else None
        return starting_policy(base, shared)
    model = final_model(run.path) if run.benchmark.exists() else None
    return str(model) if model else None


def score_policy(model: str, sweep: Sweep, instances: list[Instance], max_tokens: int, name: str) -> dict[str, Any]:
    """``model``'s greedy answers to ``instances`` through a Serve deployment with the sweep's serving
    settings: the table and the ids it solved (valid, optimal)."""
    from actors.validation import score_answers, serve_answerer
    from serving.deployment import deploy, undeploy

    serving = sweep.base_config().serving_config().model_copy(update={"model": str(Path(model).resolve())})
    policy = deploy(serving, name, f"/{name}", follow_updates=False)
    try:
        _, verdicts, _ = score_answers(serve_answerer(policy.handle, max_tokens), instances)
    finally:
        undeploy(name)
    return {"table": score(instances, {v.id: v for v in verdicts}).to_dict()} | solved_ids(verdicts)


def rescore(
    out: Path, sweep: Sweep, name: str, per_cell: int | None, max_tokens: int, against: str | None = None, log=print
) -> Path:
    """Score every policy of the sweep that has no ``name`` record yet, then write ``<out>/<name>.md``."""
    from actors.validation import suite_instances
    from cli.training import connect_ray

    out = out.resolve()
    instances = suite_instances(BENCHMARK, list(BENCHMARK.agent_counts), per_cell)
    settings = {"suite": BENCHMARK.name, "per_cell": per_cell, "max_tokens": max_tokens, "instances": len(instances)}
    todo = [(v, s, run) for v, s, run in policies(out, sweep) if not record_path(run, name).exists()]
    work = [(v, s, run, model) for v, s, run in todo if (model := model_of(out, sweep, v, run))]
    if work:
        connect_ray(1)
    for variant, seed, run, model in work:
        log(f"{name}: scoring {variant} seed {seed} ({model}) on {len(instances)} instances")
        shown = Path(model).relative_to(out) if Path(model).is_relative_to(out) else model  # no machine paths
        record = settings | {"model": str(shown)} | score_policy(model, sweep, instances, max_tokens, f"rescore-{name}")
        record_path(run, name).parent.mkdir(parents=True, exist_ok=True)
        record_path(run, name).write_text(json.dumps(record, indent=1))
        log(f"{name}: {variant} seed {seed}: " + sums_text(record["table"]))
    summary = out / f"{name}.md"
    summary.write_text(to_markdown(out, sweep, name, against))
    return summary


def sums_text(table: dict) -> str:
    return ", ".join(f"{a} agents {t['sum']['acc']:.1f}/{t['sum']['opt']:.1f}" for a, t in table.items())


def _gained_lost_cell(record: dict, start: dict, agents: int) -> str:
    gained, lost = gained_lost(set(record["valid"]), set(start["valid"]), agents)
    return f"{gained}/{lost} (p {mcnemar_p(gained, lost):.2g})"


def to_markdown(out: Path, sweep: Sweep, name: str, against: str | None = None) -> str:
    """Per policy its Sums and, for the trials, the instances gained/lost against the start; then the mean
    ± std over seeds per variant and its change against the start; with ``against`` (a variant), each other
    trial paired with that variant's trial of the same seed."""
    records = {
        (variant, seed): read_json(record_path(run, name))
        for variant, seed, run in policies(out, sweep)
        if record_path(run, name).exists()
    }
    if not records:
        return f"No `{name}` records under {out}.\n"
    start = records.get((START, "-"))
    first = next(iter(records.values()))
    agents = list(first["table"])
    scope = "the full benchmark" if first["per_cell"] is None else f"the first {first['per_cell']} instances a cell"
    lines = [
        f"Greedy, {scope} ({first['instances']} instances, completions <= {first['max_tokens']} tokens); "
        "acc./opt. Sum in %; gained/lost: instances solved (valid) by the trial and not by the start, and "
        "the reverse, with the exact McNemar p-value of that split (instance noise only, not seed noise).",
        "",
    ]
    head = ["variant", "seed"] + [f"{a} agents acc/opt Sum" for a in agents]
    head += [f"{a} agents gained/lost" for a in agents] if start else []
    lines += md_head(head)
    for (variant, seed), record in records.items():
        table = record["table"]
        cells = [variant, seed] + [f"{table[a]['sum']['acc']:.1f}/{table[a]['sum']['opt']:.1f}" for a in agents]
        if start:
            cells += ["-" if variant == START else _gained_lost_cell(record, start, int(a)) for a in agents]
        lines.append(md_row(cells))
    if start:
        lines += _by_holes_table(records, start, agents)
    head = ["variant", "seeds"] + [f"{a} agents acc Sum" for a in agents] + [f"{a} agents opt Sum" for a in agents]
    head += [f"{a} agents acc. change" for a in agents] if start else []
    lines += ["", "Mean ± std over seeds (change: against the start, mean ± std of the per-seed changes):", ""]
    lines += md_head(head)
    for variant in dict.fromkeys(v for v, _ in records):
        mine = [r["table"] for (v, _), r in records.items() if v == variant]
        cells = [variant, str(len(mine))]
        cells += [mean_std([t[a]["sum"]["acc"] for t in mine], 1) for a in agents]
        cells += [mean_std([t[a]["sum"]["opt"] for t in mine], 1) for a in agents]
        if start:
            base = start["table"]
            cells += [
                "-" if variant == START else _signed([t[a]["sum"]["acc"] - base[a]["sum"]["acc"] for t in mine])
                for a in agents
            ]
        lines.append(md_row(cells))
    if against:
        lines += _against_table(records, against, agents)
    return "\n".join(lines) + "\n"


def _by_holes_table(records: dict[tuple[str, str], dict], start: dict, agents: list[str]) -> list[str]:
    """Per trial (and per variant, the mean over its seeds), the net instances it gained against the start at
    each of the benchmark's hole levels."""
    nets = {
        key: [[_net(record, start, int(a), holes) for holes in HOLE_LEVELS] for a in agents]
        for key, record in records.items()
        if key[0] != START
    }
    levels = " / ".join(f"{holes:g}" for holes in HOLE_LEVELS)
    per_subset = start["per_cell"] or BENCHMARK.per_subset  # instance k of a subset has hole level k % 4
    shares = ", ".join(
        f"{sum(k % len(HOLE_LEVELS) == h for k in range(per_subset)) / per_subset:.0%}" for h in range(len(HOLE_LEVELS))
    )
    lines = [
        "",
        "Where the change lands: net instances (gained - lost against the start) by the hole ratio the benchmark "
        f"instance was drawn with ({levels}: {shares} of each agent count's instances); the start's "
        "row: the instances it solves.",
        "",
    ]
    lines += md_head(["variant", "seed"] + [f"{a} agents, holes {levels}" for a in agents])
    solved = [[len(cell_ids(set(start["valid"]), int(a), holes=holes)) for holes in HOLE_LEVELS] for a in agents]
    lines.append(md_row([START, "-"] + [" / ".join(str(n) for n in row) for row in solved]))
    for (variant, seed), counts in nets.items():
        lines.append(md_row([variant, seed] + [" / ".join(f"{n:+d}" for n in row) for row in counts]))
    for variant in dict.fromkeys(v for v, _ in nets):
        seeds = [counts for (v, _), counts in nets.items() if v == variant]
        if len(seeds) > 1:
            means = [
                [sum(c[k][h] for c in seeds) / len(seeds) for h in range(len(HOLE_LEVELS))] for k in range(len(agents))
            ]
            lines.append(
                md_row([variant, f"mean of {len(seeds)}"] + [" / ".join(f"{n:+.1f}" for n in row) for row in means])
            )
    return lines


def _net(record: dict, start: dict, agents: int, holes: float) -> int:
    gained, lost = gained_lost(set(record["valid"]), set(start["valid"]), agents, holes=holes)
    return gained - lost


def _against_table(records: dict[tuple[str, str], dict], against: str, agents: list[str]) -> list[str]:
    """Each trial beside ``against``'s trial of the same seed: instances gained/lost and the McNemar p."""
    pairs = [
        (variant, seed, record, records[(against, seed)])
        for (variant, seed), record in records.items()
        if variant not in (START, against) and (against, seed) in records
    ]
    head = ["variant", "seed"] + [f"{a} agents gained/lost vs {against}" for a in agents]
    lines = ["", f"Each trial against `{against}` of the same seed (same instances; gained/lost as above):", ""]
    lines += md_head(head)
    for variant, seed, record, other in pairs:
        cells = [variant, seed] + [_gained_lost_cell(record, other, int(a)) for a in agents]
        lines.append(md_row(cells))
    return lines


def _signed(values: list[float]) -> str:
    text = mean_std(values, 1)
    return text if text.startswith("-") else "+" + text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="the sweep YAML")
    parser.add_argument("out", type=Path, help="the sweep directory")
    parser.add_argument("--name", default="full-benchmark", help="the records' name (default: full-benchmark)")
    parser.add_argument("--per-cell", type=int, default=None, help="instances a cell (default: all 50)")
    parser.add_argument("--max-tokens", type=int, default=None, help="default: the sweep's benchmark.max_tokens")
    parser.add_argument("--summary-only", action="store_true", help="only rewrite the summary from the records")
    parser.add_argument("--against", default=None, help="also pair each trial with this variant's (same seed)")
    args = parser.parse_args(argv)
    sweep = load_sweep(args.sweep)
    if args.summary_only:
        path = args.out / f"{args.name}.md"
        path.write_text(to_markdown(args.out, sweep, args.name, args.against))
    else:
        max_tokens = args.max_tokens or sweep.base_config().benchmark.max_tokens
        path = rescore(args.out, sweep, args.name, args.per_cell, max_tokens, args.against)
    print(path.read_text())


if __name__ == "__main__":
    main()
