"""Training commands: ``sft`` (warm start on solver demonstrations) and ``train`` (GRPO rounds)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated

import typer

from cli.common import console, fail
from env.config import ConfigError


def connect_ray(num_cpus: float = 0, dashboard: bool = False, dashboard_host: str = "127.0.0.1") -> None:
    """Join the cluster in RAY_ADDRESS, else start a local one with at least ``num_cpus`` logical CPUs, so
    a small machine can still place every actor; with ``dashboard`` (off with ENVENGINEER_DASHBOARD=0) it
    serves the Ray dashboard on ``dashboard_host``. Actor output goes to the console only with
    ENVENGINEER_ACTOR_LOGS=1 (it is always in Ray's session logs)."""
    import ray

    if os.environ.get("RAY_ADDRESS"):
        ray.init()
        return
    cpus = max(os.cpu_count() or 1, math.ceil(num_cpus))
    dashboard = dashboard and os.environ.get("ENVENGINEER_DASHBOARD", "1") != "0"
    context = ray.init(
        address="local",
        num_cpus=cpus,
        dashboard_host=dashboard_host,
        include_dashboard=dashboard,
        log_to_driver=bool(os.environ.get("ENVENGINEER_ACTOR_LOGS")),  # actor logs stay in Ray's session dir
    )
    if dashboard and context.dashboard_url:
        hint = token_hint()
        console.print(f"Ray dashboard: http://{context.dashboard_url}" + (f"  ({hint})" if hint else ""))


def token_hint() -> str | None:
    """How to get the token the dashboard asks for, when Ray's token authentication is on (Ray 2.60 turns it
    on when a token exists: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "token auth: the page asks for the token in $RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return f"token auth: the page asks for the token; `cat {path}` prints it"
    if Path("~/.ray/auth_token").expanduser().exists():
        return "token auth: the page asks for the token; `ray get-auth-token` prints it"
    return None


SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Change one setting of the YAML: KEY=VALUE with a dotted key and a YAML value, e.g. "
        "grpo.learning_rate=1e-5 or env.sizes.3.hole_ratio=0.1; repeat for more.",
    ),
]


def _load(config: Path, assignments: list[str] | None = None, **overrides):
    from actors.settings import load_train_config

    try:
        return load_train_config(config, {k: str(v) for k, v in overrides.items() if v is not None}, assignments or [])
    except ConfigError as error:
        raise fail(str(error)) from None


def ensure_writable(out: Path) -> None:
    """Exit with a clear error (before any work starts) if ``out`` cannot be created and written."""
    probe = out / ".write-probe"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise fail(f"cannot write to the run directory {out}: {error.strerror or error}") from None


def sft(
    config: Annotated[Path, typer.Option(help="Training YAML (its model, sft, deepspeed and resources sections).")],
    out: Annotated[Path, typer.Option(help="Folder for the warm-started model (Hugging Face format).")],
    model: Annotated[Path | None, typer.Option(help="Model to start from (default: the config's model).")] = None,
    assignments: SetOption = None,
) -> None:
    """Warm-start the policy on solver demonstrations and report the held-out valid rate before and after."""
    from actors.sft import run_sft

    settings = _load(config, assignments, model=model)
    ensure_writable(out)
    connect_ray(settings.required_cpus())

    def progress(step: int, steps: int, epoch: int, loss: float) -> None:
        if step % 25 == 0 or step == steps:
            console.print(f"sft step {step}/{steps} (epoch {epoch}) loss {loss:.4f}")

    report = run_sft(settings, out, progress=progress)
    for when in ("before", "after"):
        if report[when]:
            summary = report[when]
            console.print(f"{when}: valid {summary['valid_rate']:.1%}, optimal {summary['optimal_rate']:.1%}")
    console.print(f"wrote {out} ({report['steps']} steps, {report['seconds']:.0f} s)")


def train(
    config: Annotated[Path, typer.Option(help="Training YAML (see configs/train_tiny.yaml).")],
    rounds: Annotated[int, typer.Option(help="Rounds to run on the config's environment.")] = 1,
    run_dir: Annotated[Path | None, typer.Option(help="Override the config's run_dir.")] = None,
    assignments: SetOption = None,
) -> None:
    """GRPO on the config's environment: rollout workers, buffer, DeepSpeed learners and the vLLM
    deployment on Ray. Resumes from the run directory's newest checkpoint if there is one."""
    from actors.tracking import Tracker, TrackingError
    from actors.trainer import Trainer

    settings = _load(config, assignments, run_dir=run_dir)
    ensure_writable(Path(settings.run_dir))
    try:
        tracker = Tracker.start(settings.tracking, settings.label or Path(settings.run_dir).name,
                                settings.model_dump(mode="json"), settings.run_dir)  # fmt: skip
    except TrackingError as error:
        raise fail(str(error)) from None
    connect_ray(settings.required_cpus())
    trainer = Trainer(settings)
    trainer.tracker = tracker
    try:
        if trainer.resume():
            console.print(f"resumed at round {trainer.state.round}, step {trainer.state.step}")
        for round_index in range(trainer.state.round, rounds):
            for record in trainer.train_round(round_index, settings.env):
                console.print(
                    f"round {record['round']} step {record['step']}: reward {record['reward_mean']:.3f} "
                    f"valid {record['valid_rate']:.1%} optimal {record['optimal_rate']:.1%} "
                    f"({record['time']['wall']:.1f} s, version {record['weight_version']})"
                )
        print(json.dumps({"run_dir": settings.run_dir, "global_step": trainer.state.global_step}))
    finally:
        trainer.shutdown()
        tracker.finish()


def _warn_of_changes(recorded: Path, settings) -> None:
    """Resuming: name every setting that differs from the run's recorded ``run_config.yaml`` (the run goes
    on with the new ones, e.g. more rounds; a changed learning rate is more likely a mistake)."""
    import yaml

    from actors.settings import changed_settings

    if recorded.exists():
        changes = changed_settings(yaml.safe_load(recorded.read_text()), json.loads(settings.model_dump_json()))
        if changes:
            console.print(f"[yellow]warning:[/yellow] resuming with settings that differ from {recorded}:")
            for line in changes:
                console.print(f"  {line}")


def run(
    config: Annotated[Path, typer.Argument(help="Run YAML (see configs/cpu-demo.yaml).")],
    out: Annotated[Path, typer.Option(help="Run directory.")],
    resume: Annotated[bool, typer.Option(help="Continue the run in --out from where it stopped.")] = False,
    assignments: SetOption = None,
) -> None:
    """The main job: warm start, then rounds of GRPO -> validation -> environment engineer, then the
    benchmark table, report.md and plots. Joins RAY_ADDRESS or starts a local Ray."""
    import shlex
    import time

    from actors.checkpoint import CheckpointError
    from actors.job import run_job
    from actors.learner import LearnerGroupBroken
    from actors.run_dir import RunDir
    from actors.settings import load_run_config
    from actors.tracking import TrackingError

    if RunDir(out).run_config.exists() and not resume:
        raise fail(f"{out} holds a run; pass --resume to continue it or choose another --out")
    try:
        settings = load_run_config(config, assignments=assignments or [])
    except ConfigError as error:
        raise fail(str(error)) from None
    if resume:
        _warn_of_changes(RunDir(out).run_config, settings)
    ensure_writable(out)
    connect_ray(settings.required_cpus(), dashboard=True, dashboard_host=settings.network.dashboard_host)
    started = time.perf_counter()
    try:
        final = run_job(settings, out, log=console.print)
    except TrackingError as error:
        raise fail(str(error)) from None
    except (CheckpointError, LearnerGroupBroken) as error:
        resume_command = " ".join(
            [f"envengineer run {config} --out {out} --resume", *(f"--set {shlex.quote(a)}" for a in assignments or [])]
        )
        raise fail(f"{error}\nthe run stopped; `{resume_command}` continues it", 1) from None
    console.print(f"done in {time.perf_counter() - started:.0f} s: {RunDir(out).report}")
    print(final["markdown"])


def tune_cmd(
    sweep_file: Annotated[Path, typer.Argument(help="Sweep YAML (see configs/ablation-cpu.yaml).")],
    out: Annotated[Path, typer.Option(help="Sweep directory: Tune's files, one run directory per trial, summary.")],
    resume: Annotated[bool, typer.Option(help="Continue the sweep in --out; finished trials are not rerun.")] = False,
    assignments: SetOption = None,
) -> None:
    """A Ray Tune sweep whose trials are whole runs of the main job (variants x seeds); writes
    summary.md, summary.csv and summary.png. Joins RAY_ADDRESS or starts a local Ray."""
    from actors.run_status import write_sweep_record
    from tune.sweep import load_sweep, run_sweep, trial_resources

    try:
        sweep = load_sweep(sweep_file, assignments or [])
    except ConfigError as error:
        raise fail(str(error)) from None
    if (out / "tune").exists() and not resume:
        raise fail(f"{out} holds a sweep; pass --resume to continue it or choose another --out")
    ensure_writable(out)
    write_sweep_record(out, sweep_file, assignments or [])  # `envengineer status` names the command that continues
    cpus = max(trial_resources(c)["CPU"] for c in sweep.configs.values())
    connect_ray(cpus, dashboard=True, dashboard_host=sweep.base_config().network.dashboard_host)
    summary = run_sweep(sweep, out, resume=resume, log=console.print)
    console.print(f"summary: {summary}")
    print(summary.read_text())


def _model_folder(path: Path) -> Path:
    """A model folder as it is; a run folder's policy now (``actors.checkpoint.final_model``: its newest
    checkpoint's model, or the kept one the validation guard went back to); else a clear error."""
    from actors.checkpoint import final_model
    from actors.run_dir import RunDir

    if (path / "config.json").exists():
        return path
    if RunDir(path).run_config.exists():
        if (found := final_model(path)) is None or not (found / "config.json").exists():
            raise fail(f"{path} is a run folder without a checkpoint yet")
        console.print(f"{path}: the run's policy in {found}")
        return found
    raise fail(f"{path}: neither a model folder (no config.json) nor a run folder (no run_config.yaml)")


def eval_cmd(
    model: Annotated[
        str,
        typer.Option(
            help="A model folder, a run folder (its policy now), or openai:NAME (an OpenAI-compatible endpoint)."
        ),
    ],
    suite: Annotated[str, typer.Option(help="benchmark or validation.")] = "benchmark",
    agents: Annotated[list[int] | None, typer.Option(help="Agent counts (default: all of the suite's).")] = None,
    per_cell: Annotated[int | None, typer.Option(help="At most this many instances per cell.")] = None,
    sizes: Annotated[list[int] | None, typer.Option(help="Map sizes (default: all of the suite's).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Longest answer.")] = 1024,
    base_url: Annotated[str | None, typer.Option(help="openai: the endpoint, e.g. http://127.0.0.1:8000/v1.")] = None,
    api_key_env: Annotated[str, typer.Option(help="openai: environment variable holding the key.")] = "OPENAI_API_KEY",
    out: Annotated[Path | None, typer.Option(help="Write the table and verdicts here (JSON).")] = None,
    dtype: Annotated[str, typer.Option(help="Serving precision: auto (the checkpoint's), float32, bfloat16.")] = "auto",
) -> None:
    """Score a model as a zero-shot solver on a suite and print the paper's table (acc./opt. per size, Sum)."""
    from actors.validation import openai_answerer, score_answers, serve_answerer, suite_instances
    from env.benchmark import SUITES, score

    if suite not in SUITES:
        raise fail(f"unknown suite {suite!r} ({', '.join(SUITES)})")
    instances = suite_instances(SUITES[suite], agents or SUITES[suite].agent_counts, per_cell, sizes)
    if model.startswith("openai:"):
        if not base_url:
            raise fail("openai:NAME needs --base-url")
        answer = openai_answerer(base_url, model.removeprefix("openai:"), api_key_env, max_tokens)
    else:
        from serving.deployment import deploy
        from serving.settings import ServingConfig

        folder = _model_folder(Path(model))
        connect_ray(1)
        policy = deploy(
            ServingConfig(model=str(folder.resolve()), max_model_len=4096, dtype=dtype), "eval", "/eval", False
        )
        answer = serve_answerer(policy.handle, max_tokens)
    console.print(f"scoring {model} on {len(instances)} {suite} instances")
    _, verdicts, answers = score_answers(answer, instances)
    table = score(instances, {v.id: v for v in verdicts})
    if out:
        rows = [v.to_dict() | {"answer": a} for v, a in zip(verdicts, answers)]
        settings = {"model": model, "suite": suite, "agents": agents, "sizes": sizes, "per_cell": per_cell}
        record = settings | {"max_tokens": max_tokens, "table": table.to_dict(), "verdicts": rows}
        out.write_text(json.dumps(record, indent=1))
    print(table.to_markdown())


def compare_cmd(
    first: Annotated[
        Path, typer.Argument(help="A: `envengineer eval --out` JSON, a run folder (its start: RUN/start) or a record.")
    ],
    second: Annotated[Path, typer.Argument(help="B: the same, scored on the same instances.")],
    by_size: Annotated[bool, typer.Option(help="Also a row per map size, before each agent count's Sum.")] = False,
    by_holes: Annotated[
        bool, typer.Option(help="Also a row per hole level of the suite (0, 0.1, 0.2, 0.3), before the Sum.")
    ] = False,
) -> None:
    """Pair two policies' scores instance by instance: per agent count both Sums, the instances B solves and A
    does not (gained) and the reverse (lost), and the exact McNemar p-value of that split."""
    from actors.run_dir import RunDir
    from env.compare import CompareError, compare, read_scored, to_markdown

    try:
        a, b = (read_scored(RunDir(p).benchmark if p.is_dir() else p) for p in (first, second))
        rows = compare(a, b, by_size, by_holes)
    except CompareError as error:
        raise fail(str(error)) from None
    print(to_markdown(a, b, rows))


def status_cmd(
    path: Annotated[
        Path, typer.Argument(help="A run folder (`envengineer run --out`) or a sweep folder (`tune --out`).")
    ],
    report: Annotated[
        bool, typer.Option(help="A run folder: also write its report.md and plots/ from the rounds so far.")
    ] = False,
) -> None:
    """Where a run or a sweep stands, from its folder alone: steps and rounds done, the newest checkpoint, the
    validation per round, the benchmark before and after, and the command that continues it."""
    from actors.run_dir import RunDir
    from actors.run_status import describe_run, describe_sweep, is_sweep, run_status

    if RunDir(path).run_config.exists():
        lines = describe_run(run_status(path))
        if report:
            from actors.report import write_report

            lines.append(f"  report so far: {write_report(path)}")
    elif is_sweep(path):
        if report:
            raise fail("--report is for a run folder; a sweep's summary: python -m tune.summary SWEEP.yaml DIR")
        lines = describe_sweep(path)
    else:
        raise fail(
            f"{path}: neither a run folder (no run_config.yaml) nor a sweep folder (no sweep.json, tune/ or shared/)"
        )
    print("\n".join(lines))


def samples_cmd(
    path: Annotated[Path, typer.Argument(help="A run folder whose config logs samples (grpo.log_samples > 0).")],
    step: Annotated[int | None, typer.Option(help="The global GRPO step (default: the newest logged).")] = None,
    failure: Annotated[
        str | None, typer.Option(help="Only samples of this failure category, or `valid` for the valid ones.")
    ] = None,
    groups: Annotated[int, typer.Option(min=1, help="At most this many groups.")] = 4,
    thinking: Annotated[bool, typer.Option(help="Show each sample's <think> block too.")] = False,
) -> None:
    """What the policy wrote at a step: the logged groups, each with its board and every sample's reward,
    verdict (where the plan fails) and answer. Reads the run folder only; works while the run runs."""
    from actors.sample_view import NoSamples, describe_samples

    try:
        print(describe_samples(path, step, failure, groups, thinking))
    except NoSamples as error:
        raise fail(str(error)) from None


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("samples")(samples_cmd)
    app.command("eval")(eval_cmd)
    app.command("compare")(compare_cmd)
    app.command("tune")(tune_cmd)
    app.command()(sft)
    app.command()(train)
    app.command()(run)
