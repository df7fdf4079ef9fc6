"""The main job: round 0 config -> for each round: GRPO -> validation -> engineer -> next config; then the
benchmark, a report and plots.

Everything a round produces is a file of the run directory, written when that part completes:
``round_<k>/env_config.yaml``, ``round_<k>/validation.json``, ``round_<k>/engineer/`` (prompt, response,
decision); with the trainer's ``metrics.jsonl`` and ``checkpoints/``, a rerun with the same directory
skips what is done and resumes training from its last checkpoint (never redoing a finished round).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import yaml

from actors.engineer import Decision, Engineer
from actors.engineer_context import EngineerInputs, FailedCase, RoundRecord
from actors.settings import RunConfig
from actors.validation import Validator, eval_instances
from env.benchmark import BENCHMARK, VALIDATION, score
from env.config import EnvConfig, load_config, random_config, save_config
from env.render import ansi
from env.stats import FailureTable

Log = Callable[[str], None]
# The engineer and the validator hold no state a restart loses: Ray restarts them and retries the call.
RESTARTABLE = {"max_restarts": 2, "max_task_retries": 2}


def prepare_model(config: RunConfig, out: Path, log: Log) -> str:
    """The policy to train: the config's folder, or a preset built here; warm-started if asked."""
    from serving.model import PRESETS, init_model

    model = config.model
    if model in PRESETS:
        built = out / "model-init"
        if not (built / "config.json").exists():
            log(f"building the {model} policy in {built}")
            init_model(built, PRESETS[model])
        model = str(built.resolve())
    if not config.warm_start:
        return model
    warm = out / "model-sft"
    if not (warm / "sft_report.json").exists():
        from actors.sft import run_sft

        log("warm start: SFT on solver demonstrations")
        report = run_sft(config.model_copy(update={"model": model, "env": round0(config)}), warm)
        log(f"warm start: held-out valid {report['before']['valid_rate']:.1%} -> {report['after']['valid_rate']:.1%}")
    return str(warm.resolve())


def round0(config: RunConfig) -> EnvConfig:
    return config.env or random_config(config.seed)


def failed_cases(instances, verdicts, answers, count: int) -> list[FailedCase]:
    cases = []
    for instance, verdict, answer in zip(instances, verdicts, answers):
        if not verdict.valid and len(cases) < count:
            cases.append(FailedCase(ansi(instance), answer[:600], verdict.failure or "", verdict.detail))
    return cases


def start_engineer(config: RunConfig, trainer, initial_model: str):
    """The engineer actor (and, for the ``base`` backend, a frozen deployment of the initial model)."""
    base = config.app_name("base")
    if config.engineer.backend == "base":
        from serving.deployment import deploy

        deploy(config.serving_config().model_copy(update={"model": initial_model}), base, f"/{base}", False)
    options = {"name": "engineer", "namespace": trainer.namespace, **RESTARTABLE}
    return Engineer.options(**options).remote(config.engineer.model_dump(), trainer.policy.name, base)


def stop_engineer(config: RunConfig) -> None:
    if config.engineer.backend == "base":
        from serving.deployment import undeploy

        undeploy(config.app_name("base"))


def run_job(
    config: RunConfig, out: str | Path, log: Log = print, on_round: Callable[[int, dict], None] | None = None
) -> dict[str, Any]:
    """Run (or resume) the main job in ``out``; returns the final benchmark table as a dict. Needs Ray.
    ``on_round(k, summary)`` gets each round's validation summary (a sweep reports it to Tune)."""
    from actors.trainer import Trainer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "run_config.yaml").write_text(yaml.safe_dump(json.loads(config.model_dump_json()), sort_keys=False))
    model = prepare_model(config, out, log)
    if config.score_start:
        score_start(config, model, out / "start", log)
    train_config = config.model_copy(update={"model": model, "run_dir": str(out), "env": round0(config)})
    trainer = Trainer(train_config)
    validation = eval_instances(VALIDATION, config.validation)
    options = {"name": "validator", "namespace": trainer.namespace, **RESTARTABLE}
    validator = Validator.options(**options).remote(trainer.policy.name)
    history: list[RoundRecord] = []
    try:
        if trainer.resume():
            log(f"resumed from {trainer.resumed_from}")
        engineer = start_engineer(config, trainer, model)
        for k in range(config.rounds):
            folder = out / f"round_{k}"
            config_path = folder / "env_config.yaml"
            if not config_path.exists():
                save_config(round0(config), config_path)
            env = load_config(config_path)
            if trainer.state.round <= k:
                train_with_progress(trainer, k, env, config.grpo.steps_per_round, log)
            table = validation_report(folder, validator, validation, config, log, k)
            trainer.telemetry.validation(k, table.summary())
            if on_round:
                on_round(k, table.summary())
            history.append(RoundRecord(k, env, table))
            if k + 1 < config.rounds and not (out / f"round_{k + 1}" / "env_config.yaml").exists():
                decision = engineer_step(config, trainer, env, table, history, folder, engineer, k)
                trainer.telemetry.decision(decision.backend, bool(decision.changes), decision.fallback is not None)
                save_config(decision.config, out / f"round_{k + 1}" / "env_config.yaml")
                log(f"round {k}: engineer ({decision.backend}) -> {decision.changes or 'no change'}")
        final = benchmark_report(out, validator, config, log)
    finally:
        ray.kill(validator)
        stop_engineer(config)
        trainer.shutdown()
    from actors.report import write_report

    write_report(out)
    return final


def score_start(config: RunConfig, model: str, out: Path, log: Log) -> None:
    """The starting policy, before any RL, on the run's validation and benchmark instances: written as a
    round's ``validation.json`` (round -1) and a run's ``final/benchmark.json`` in ``out``; kept once done."""
    from serving.deployment import deploy, undeploy

    if (out / "final" / "benchmark.json").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    name = config.app_name("start")
    deploy(config.serving_config().model_copy(update={"model": model}), name, f"/{name}", follow_updates=False)
    validator = Validator.remote(name)
    try:
        validation_report(out, validator, eval_instances(VALIDATION, config.validation), config, log, -1)
        benchmark_report(out, validator, config, log)
    finally:
        ray.kill(validator)
        undeploy(name)


def train_with_progress(trainer, k: int, env: EnvConfig, steps: int, log: Log) -> None:
    """Train round ``k`` with a progress bar over its steps and a line per step."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task(f"round {k} GRPO", total=steps, completed=trainer.state.step)

        def on_step(record: dict) -> None:
            progress.advance(task)
            log(f"round {k} step {record['step']}: reward {record['reward_mean']:.3f} valid {record['valid_rate']:.1%}")

        trainer.train_round(k, env, on_step=on_step)


def validation_report(folder: Path, validator, instances, config: RunConfig, log: Log, k: int) -> FailureTable:
    path = folder / "validation.json"
    if path.exists():
        return FailureTable.from_dict(json.loads(path.read_text())["table"])
    table, verdicts, answers = ray.get(validator.score.remote(instances, config.validation.max_tokens))
    cases = failed_cases(instances, verdicts, answers, config.engineer.context_settings().failed_examples)
    report = {
        "round": k,
        "summary": table.summary(),
        "table": table.to_dict(),
        "failed_cases": [c.__dict__ for c in cases],
    }
    path.write_text(json.dumps(report, indent=1))
    summary = table.summary()
    when = f"round {k}" if k >= 0 else "before RL"
    log(f"{when}: validation valid {summary['valid_rate']:.1%}, optimal {summary['optimal_rate']:.1%}")
    return table


def engineer_step(config, trainer, env, table, history, folder, engineer, k) -> Decision:
    report = json.loads((folder / "validation.json").read_text())
    rollouts = ray.get(trainer.buffer.statistics.remote())["table"]
    inputs = EngineerInputs(
        round=k,
        config=env,
        validation=table,
        rollouts=FailureTable.from_dict(rollouts),
        failed_cases=[FailedCase(**c) for c in report["failed_cases"]],
        history=history[:-1],  # earlier rounds; this one is the failure breakdown
        training=json.loads(config.grpo.model_dump_json()) | {"deepspeed": config.deepspeed.model_dump()},
        bookkeeping={"round": k, "steps_per_round": config.grpo.steps_per_round, "budget": env.num_instances},
    )
    return ray.get(engineer.propose.remote(inputs, str(folder / "engineer")))


def benchmark_report(out: Path, validator, config: RunConfig, log: Log) -> dict[str, Any]:
    path = out / "final" / "benchmark.json"
    if path.exists():
        return json.loads(path.read_text())
    instances = eval_instances(BENCHMARK, config.benchmark)
    log(f"benchmark: {len(instances)} instances")
    _, verdicts, _ = ray.get(validator.score.remote(instances, config.benchmark.max_tokens))
    table = score(instances, {v.id: v for v in verdicts})
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"table": table.to_dict(), "markdown": table.to_markdown()}
    path.write_text(json.dumps(result, indent=1))
    log("\n" + table.to_markdown())
    return result
