"""Testbed commands: generate, render, evaluate, benchmark build|score, config check|project|diff, demo."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import track
from rich.table import Table

from cli.common import console, fail
from env.benchmark import SUITES, build, checksum, score
from env.config import ConfigError, default_config, diff, load_config, project, save_config
from env.evaluate import FAILURE_CATEGORIES, RewardConfig, Verdict, evaluate
from env.generator import generate as generate_instances
from env.instance import Instance, InstanceError, read_instances, read_jsonl, write_instances
from env.prompt import format_answer, parse_response, render_prompt

config_app = typer.Typer(help="Check, project and compare environment configs.", no_args_is_help=True)
benchmark_app = typer.Typer(help="Build and score the fixed evaluation suites.", no_args_is_help=True)


def _load_instances(path: Path) -> list[Instance]:
    try:
        return read_instances(path)
    except (OSError, InstanceError) as error:
        raise fail(str(error)) from None


def _load_config(path: Path):
    try:
        return load_config(path)
    except (OSError, ConfigError) as error:
        raise fail(str(error)) from None


def _load_reward(path: Path) -> RewardConfig:
    try:
        return RewardConfig.model_validate(yaml.safe_load(path.read_text()) or {})
    except (OSError, yaml.YAMLError, ValidationError) as error:
        raise fail(f"{path}: not a valid reward config: {error}") from None


def _read_responses(path: Path) -> dict[str, str]:
    """``{"id": ..., "response": ...}`` lines as a dict (a later line with the same id wins)."""
    try:
        rows = read_jsonl(path)
    except (OSError, ValueError) as error:
        raise fail(str(error)) from None
    responses = {}
    for number, row in enumerate(rows, 1):
        if not isinstance(row.get("id"), str) or not isinstance(row.get("response"), str):
            raise fail(f"{path}: row {number} needs a string 'id' and a string 'response'")
        responses[row["id"]] = row["response"]
    return responses


def _progress(description: str, total: int):
    """A progress-bar wrapper for an iterable of ``total`` items (drawn on stderr)."""
    return lambda items: track(items, total=total, description=description, console=console)


def _summary(verdicts: list[Verdict]) -> Table:
    table = Table(title=f"{len(verdicts)} responses")
    table.add_column("outcome")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    counts = Counter("valid" if v.valid else v.failure for v in verdicts)
    counts["optimal"] = sum(v.optimal for v in verdicts)
    for name in ("valid", "optimal", *FAILURE_CATEGORIES, "missing"):
        if counts.get(name):
            table.add_row(name, str(counts[name]), f"{100 * counts[name] / max(len(verdicts), 1):.1f}%")
    return table


def generate(
    config: Annotated[Path, typer.Option(help="EnvConfig YAML file.")],
    out: Annotated[Path, typer.Option(help="Instances JSON Lines file to write.")],
    workers: Annotated[int, typer.Option(help="Processes to use (the output does not depend on it).")] = 1,
    report: Annotated[Path | None, typer.Option(help="Also write the generation report (JSON) here.")] = None,
    id_prefix: Annotated[str, typer.Option(help="Prefix of instance ids.")] = "train",
) -> None:
    """Generate a round's solved instances from an environment config (seeded: same config, same bytes)."""
    env_config = _load_config(config)
    start = time.perf_counter()
    instances, gen_report = generate_instances(
        env_config, id_prefix, workers, progress=_progress("generating", env_config.num_instances)
    )
    count = write_instances(instances, out)
    console.print(f"wrote {count} instances to {out} in {time.perf_counter() - start:.1f} s")
    for line in gen_report.shortfalls:
        console.print(f"[yellow]shortfall:[/yellow] {line}")
    if report:
        report.write_text(json.dumps(gen_report.to_dict(), indent=2))


def render(
    instances: Annotated[Path, typer.Option(help="Instances JSON Lines file.")],
    id: Annotated[str | None, typer.Option("--id", help="Instance id (default: the first).")] = None,
    responses: Annotated[Path | None, typer.Option(help="Draw the plan of this id's response.")] = None,
    solution: Annotated[bool, typer.Option(help="Draw the solver's witness plan.")] = False,
    format: Annotated[str, typer.Option("--format", help="ansi, png, gif or prompt.")] = "ansi",
    out: Annotated[Path | None, typer.Option(help="Output file (png/gif; ansi/prompt print if absent).")] = None,
) -> None:
    """Draw an instance, optionally with a plan: text, PNG of the paths, GIF step by step, or its prompt."""
    from env import render as draw

    pool = _load_instances(instances)
    chosen = next((i for i in pool if i.id == id), None) if id else (pool[0] if pool else None)
    if chosen is None:
        raise fail(f"no instance {id!r} in {instances}")
    plan = chosen.solution if solution else None
    if responses:
        text = _read_responses(responses).get(chosen.id)
        if text is None:
            raise fail(f"no response for {chosen.id!r} in {responses}")
        parsed = parse_response(text, chosen.num_agents)
        if not isinstance(parsed, list):
            raise fail(f"the response does not parse ({parsed.category}: {parsed.detail})")
        plan = parsed
    if format in ("ansi", "prompt"):
        text = draw.ansi(chosen, plan) if format == "ansi" else render_prompt(chosen)
        if out:
            out.write_text(text + "\n")
        else:
            print(text)
    elif format in ("png", "gif"):
        if out is None:
            raise fail(f"--out is needed for {format}")
        if format == "gif" and plan is None:
            raise fail("a GIF needs a plan: pass --solution or --responses")
        (draw.png if format == "png" else draw.gif)(chosen, plan, out)
        console.print(f"wrote {out}")
    else:
        raise fail(f"unknown format {format!r} (ansi, png, gif, prompt)")


def evaluate_cmd(
    instances: Annotated[Path, typer.Option(help="Instances JSON Lines file.")],
    responses: Annotated[Path, typer.Option(help='Responses: one {"id": ..., "response": "..."} a line.')],
    out: Annotated[Path, typer.Option(help="Verdicts JSON Lines file to write (one per response).")],
    reward: Annotated[Path | None, typer.Option(help="RewardConfig YAML (default: valid 1, optimal +0.5).")] = None,
) -> None:
    """Score responses: validity, optimality, the first failure and the reward of each."""
    pool = {i.id: i for i in _load_instances(instances)}
    answers = _read_responses(responses)
    unknown = [i for i in answers if i not in pool]
    if unknown:
        raise fail(f"{len(unknown)} responses name unknown instance ids, e.g. {unknown[:3]}")
    reward_config = _load_reward(reward) if reward else RewardConfig()
    verdicts = [evaluate(pool[i], text, reward_config) for i, text in answers.items()]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(v.to_dict()) + "\n" for v in verdicts))
    Console().print(_summary(verdicts))


@benchmark_app.command("build")
def benchmark_build(
    suite: Annotated[str, typer.Option(help="benchmark, validation or all.")] = "all",
    workers: Annotated[int, typer.Option(help="Processes to use (the output does not depend on it).")] = 2,
    check: Annotated[bool, typer.Option(help="Rebuild and compare with the shipped checksum; write nothing.")] = False,
    out_dir: Annotated[Path | None, typer.Option(help="Write here instead of env/data/.")] = None,
) -> None:
    """Build the evaluation suites deterministically (env/data/benchmark_v1.jsonl, validation_v1.jsonl)."""
    names = list(SUITES) if suite == "all" else [suite]
    if any(n not in SUITES for n in names):
        raise fail(f"unknown suite {suite!r} (benchmark, validation, all)")
    mismatched = []
    for name in names:
        spec = SUITES[name]
        start = time.perf_counter()
        total = len(spec.specs())
        instances = build(spec, workers, progress=_progress(name, total))
        target = (out_dir or spec.path.parent) / spec.path.name
        if check:
            target = Path("/tmp") / f"envengineer-check-{name}.jsonl"
        write_instances(instances, target)
        digest = checksum(target)
        console.print(f"{name}: {len(instances)} instances in {time.perf_counter() - start:.1f} s, sha256 {digest}")
        if check:
            shipped = spec.checksum_path.read_text().split()[0]
            if digest != shipped:
                mismatched.append(name)
                console.print(f"[red]{name}: differs from the shipped checksum {shipped}[/red]")
            target.unlink()
        elif out_dir is None:
            spec.checksum_path.write_text(f"{digest}  {spec.path.name}\n")
    if mismatched:
        raise typer.Exit(code=1)


@benchmark_app.command("score")
def benchmark_score(
    responses: Annotated[Path, typer.Argument(help='Responses: one {"id": ..., "response": "..."} a line.')],
    suite: Annotated[str, typer.Option(help="benchmark or validation.")] = "benchmark",
    by_wait: Annotated[bool, typer.Option(help="Also print one table per wait-ratio subset.")] = False,
    out: Annotated[Path | None, typer.Option(help="Also write the table(s) as JSON here.")] = None,
) -> None:
    """Print the paper's table: acc./opt. (%) per map size and their mean (Sum) per agent count.

    Instances without a response count as failures."""
    if suite not in SUITES:
        raise fail(f"unknown suite {suite!r}")
    instances = _load_instances(SUITES[suite].path)
    answers = _read_responses(responses)
    pool = {i.id: i for i in instances}
    verdicts = {i: evaluate(pool[i], text) for i, text in answers.items() if i in pool}
    ignored = len(answers) - len(verdicts)
    missing = len(pool) - len(verdicts)
    if ignored:
        console.print(f"[yellow]{ignored} responses name ids outside the {suite} suite; ignored[/yellow]")
    if missing:
        console.print(f"[yellow]{missing} of {len(pool)} instances have no response; counted as failures[/yellow]")
    tables = {"all": score(instances, verdicts)}
    if by_wait:
        for wait in (0.25, 0.5, 0.75):
            tables[f"wr{wait:.2f}"] = score(instances, verdicts, wait=wait)
    for name, table in tables.items():
        print(f"\n{suite} ({name}), acc./opt. in %:\n{table.to_markdown()}")
    if out:
        out.write_text(json.dumps({k: t.to_dict() for k, t in tables.items()}, indent=2))


@config_app.command("check")
def config_check(config: Annotated[Path, typer.Argument(help="EnvConfig YAML file.")]) -> None:
    """Validate a config strictly and print the instance count per size."""
    env_config = _load_config(config)
    counts = env_config.instance_counts()
    print(f"{config}: valid; {env_config.num_agents} agents, instances per size: {counts}")


@config_app.command("project")
def config_project(
    proposal: Annotated[Path, typer.Argument(help="Any YAML/JSON mapping (e.g. an LLM's proposal).")],
    base: Annotated[Path | None, typer.Option(help="Config that supplies missing fields.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the projected config here.")] = None,
) -> None:
    """Project a proposal onto the legal config space and list what was changed."""
    try:
        raw = yaml.safe_load(proposal.read_text())
    except yaml.YAMLError as error:
        raise fail(f"{proposal}: not valid YAML: {error}") from None
    base_config = _load_config(base) if base else None
    projected, notes = project(raw, base_config)
    for note in notes:
        console.print(f"[yellow]projected:[/yellow] {note}")
    if out:
        save_config(projected, out)
    else:
        print(projected.to_yaml(), end="")


@config_app.command("diff")
def config_diff(
    old: Annotated[Path, typer.Argument(help="Old config YAML.")],
    new: Annotated[Path, typer.Argument(help="New config YAML.")],
) -> None:
    """Per-field differences between two configs."""
    lines = diff(_load_config(old), _load_config(new))
    print("\n".join(lines) if lines else "no differences")


def demo(
    out: Annotated[Path, typer.Option(help="Folder for the demo's files.")] = Path("out/demo"),
    num_instances: Annotated[int, typer.Option(help="Instances to generate.")] = 64,
    seed: Annotated[int, typer.Option(help="Generator seed.")] = 0,
) -> None:
    """Testbed demo: generate from the default config, solve, render, and evaluate three kinds of answers
    (the solver's plan, the plan with one agent stalled, and a non-answer)."""
    from env import render as draw

    out.mkdir(parents=True, exist_ok=True)
    config = default_config(num_instances=num_instances, seed=seed)
    save_config(config, out / "env_config.yaml")
    start = time.perf_counter()
    instances, report = generate_instances(config, "demo")
    write_instances(instances, out / "instances.jsonl")
    console.print(
        f"generated and solved {len(instances)} instances in {time.perf_counter() - start:.1f} s "
        f"({sum(i.requires_wait for i in instances)} need a WAIT)"
    )
    example = max(instances, key=lambda i: (i.requires_wait, i.size))
    print(render_prompt(example))
    print("\nsolver's plan:\n" + format_answer(example.solution) + "\n")
    print(draw.ansi(example, example.solution))
    draw.png(example, example.solution, out / "example.png")
    draw.gif(example, example.solution, out / "example.gif")
    rows = []
    for inst in instances:
        rows.append({"id": inst.id, "kind": "solver", "response": format_answer(inst.solution)})
        stalled = [list(m) for m in inst.solution]
        stalled[0] = stalled[0][:-1]
        rows.append({"id": inst.id, "kind": "stalled", "response": format_answer(stalled)})
        rows.append({"id": inst.id, "kind": "chatter", "response": "I think agent 0 should go right."})
    pool = {i.id: i for i in instances}
    with open(out / "verdicts.jsonl", "w") as handle:
        by_kind: dict[str, list[Verdict]] = {}
        for row in rows:
            verdict = evaluate(pool[row["id"]], row["response"])
            by_kind.setdefault(row["kind"], []).append(verdict)
            handle.write(json.dumps({"kind": row["kind"], **verdict.to_dict()}) + "\n")
    for kind, verdicts in by_kind.items():
        table = _summary(verdicts)
        table.title = f"{kind} answers ({len(verdicts)})"
        Console().print(table)
    console.print(f"files in {out}: env_config.yaml, instances.jsonl, verdicts.jsonl, example.png, example.gif")
    if not all(v.valid and v.optimal for v in by_kind["solver"]):
        console.print("[red]a solver plan was judged invalid or suboptimal[/red]")
        sys.exit(1)


def register(app: typer.Typer) -> None:
    app.command()(generate)
    app.command()(render)
    app.command("evaluate")(evaluate_cmd)
    app.command()(demo)
    app.add_typer(benchmark_app, name="benchmark")
    app.add_typer(config_app, name="config")
