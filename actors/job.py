"""The main job: round 0 config -> for each round: train -> validate -> propose -> next config; then the
benchmark, a report and plots.

The stages hand each other values (the round's config, the ``ValidationResult`` with its failed cases,
the trainer's rollout failure table, the engineer's ``Decision``). Each value is also written once to the
run directory (``actors.run_dir.RunDir``) when its stage completes: that is the resume record, so a rerun
with the same directory reads back what is done and resumes training from its last checkpoint (never
redoing a finished round).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
import yaml

from actors.engineer import Decision, Engineer
from actors.engineer_context import EngineerInputs, FailedCase, RoundRecord
from actors.level_replay import ReplaySet
from actors.run_dir import RunDir, read_json
from actors.settings import RunConfig
from actors.tracking import Tracker
from actors.validation import Validator, eval_instances
from env.benchmark import BENCHMARK, VALIDATION, score
from env.compare import solved_ids
from env.config import ConfigError, EnvConfig, load_config, random_config, save_config
from env.instance import Instance, read_instances, write_instances
from env.render import ansi
from env.stats import FailureTable

if TYPE_CHECKING:
    from actors.trainer import Trainer

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
    return config.env or random_config(config.seed, num_agents=config.train_agents, pin=config.random_pin)


@dataclass
class ValidationResult:
    """Greedy validation after a round (-1: the starting policy): the failure table and the first failed
    answers the engineer is shown."""

    round: int
    table: FailureTable
    failed_cases: list[FailedCase]

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "summary": self.table.summary(),
            "table": self.table.to_dict(),
            "failed_cases": [asdict(c) for c in self.failed_cases],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationResult:
        cases = [FailedCase(**c) for c in data["failed_cases"]]
        return cls(data["round"], FailureTable.from_dict(data["table"]), cases)


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
    return Engineer.options(**options).remote(config.engineer, trainer.policy.name, base)


def stop_engineer(config: RunConfig) -> None:
    if config.engineer.backend == "base":
        from serving.deployment import undeploy

        undeploy(config.app_name("base"))


def keep_precision(config: RunConfig, run: RunDir, log: Log) -> RunConfig:
    """On resume, ``native`` precision stays what the run ran in until now (``learner.jsonl``'s last start), so a
    run resumed on other hardware (bf16 native there, or not) remains one recipe; an explicit precision (a
    ``--set`` that changes it) is taken as given."""
    from actors.metrics import read_metrics

    starts = read_metrics(run.learner)
    if not starts or "native" not in (config.deepspeed.precision, config.serving.dtype):
        return config
    ran = starts[-1]["precision"]
    deepspeed, serving = config.deepspeed, config.serving
    if deepspeed.precision == "native":
        deepspeed = deepspeed.model_copy(update={"precision": ran})
    if serving.dtype == "native":
        serving = serving.model_copy(update={"dtype": {"bf16": "bfloat16", "fp32": "float32"}[ran]})
    log(f"native precision: {ran}, as the run ran until now (learner.jsonl); to change it for the rest of the "
        "run, resume with --set deepspeed.precision=fp32|bf16 --set serving.dtype=float32|bfloat16")  # fmt: skip
    return config.model_copy(update={"deepspeed": deepspeed, "serving": serving})


def record_start(run: RunDir, trainer: Trainer, log: Log) -> None:
    """Log the learners' device and resolved precision and the code's commit, and append them to
    ``learner.jsonl`` and ``provenance.jsonl`` (one line per start or resume: a resumed run may land on other
    hardware, or run other code)."""
    from actors.provenance import collect

    learner, provenance = trainer.learners.setup, collect()
    code = provenance["code"]
    log(f"learner: {learner['device']}, {learner['precision']}; code: {code['commit'] or 'not a git checkout'}"
        + (" with uncommitted changes" if code["dirty"] else ""))  # fmt: skip
    if learner["precision_warning"]:
        log(f"warning: {learner['precision_warning']}")
    step = {"from_step": trainer.state.global_step}
    for path, record in ((run.learner, learner), (run.provenance, provenance)):
        with path.open("a") as out:
            out.write(json.dumps(step | record) + "\n")


def run_job(
    config: RunConfig,
    out: str | Path,
    log: Log = print,
    on_round: Callable[[int, dict], None] | None = None,
    tracking_group: str | None = None,
    start: RunDir | None = None,
) -> dict[str, Any]:
    """Run (or resume) the main job in ``out``; returns the final benchmark table as a dict. Needs Ray.
    ``on_round(k, summary)`` gets each round's validation summary (a sweep reports it to Tune);
    ``tracking_group`` groups the tracked runs of a sweep; ``start`` holds the starting policy's scores when
    someone else scored it (a sweep's shared start; default: the run's own ``start/``)."""
    from actors.trainer import Trainer

    run = RunDir(out)
    start = start or run.start
    if config.revert_below_start and not config.score_start and not start.validation.exists():
        raise ConfigError(f"revert_below_start compares with the starting policy's validation: set score_start "
                          f"(or score it into {start.path})")  # fmt: skip
    run.path.mkdir(parents=True, exist_ok=True)
    run.run_config.write_text(yaml.safe_dump(json.loads(config.model_dump_json()), sort_keys=False))
    config = keep_precision(config, run, log)
    name = config.label or run.path.name
    tracker = Tracker.start(config.tracking, name, config.model_dump(mode="json"), run.path, tracking_group)
    model = prepare_model(config, run.path, log)
    if config.score_start:
        score_start(config, model, run.start, log)
    train_config = config.model_copy(update={"model": model, "run_dir": str(run.path), "env": round0(config)})
    trainer = Trainer(train_config)
    trainer.tracker = tracker
    validation = eval_instances(VALIDATION, config.validation)
    options = {"name": "validator", "namespace": trainer.namespace, **RESTARTABLE}
    validator = Validator.options(**options).remote(trainer.policy.name)
    history: list[RoundRecord] = []
    try:
        if trainer.resume():
            log(f"resumed from {trainer.resumed_from}")
        record_start(run, trainer, log)
        engineer = start_engineer(config, trainer, model)
        env = round_config(run, 0, round0(config))
        replay = None
        if config.revert_below_start:
            floor = read_json(start.validation)["summary"]["valid_rate"]
            if trainer.state.global_step == 0:
                trainer.keep()  # the state round 0 returns to if it ends below the start
        for k in range(config.rounds):
            if trainer.state.round <= k:
                train_with_progress(trainer, k, env, config.grpo.steps_per_round, log, replay)
            result = validate_round(run.round(k).validation, validator, validation, config, log, k)
            if config.revert_below_start:
                guard_round(run.round(k).guard, trainer, k, result.table.summary()["valid_rate"], floor, log)
            trainer.telemetry.validation(k, result.table.summary())
            if on_round:
                on_round(k, result.table.summary())
            history.append(RoundRecord(k, env, result.table))
            decision = None
            if k + 1 < config.rounds:
                if not run.round(k + 1).env_config.exists():
                    decision = propose(config, trainer, env, result, history, run.round(k), engineer)
                    trainer.telemetry.decision(decision.backend, bool(decision.changes), decision.fallback is not None)
                    replay = replay_set(run, k + 1, config, decision.levels)
                    env = round_config(run, k + 1, decision.config)
                else:
                    replay = replay_set(run, k + 1, config, None)
                    env = round_config(run, k + 1, None)
            tracker.round(k, trainer.state.global_step, result.table.summary(), decision)
            log(round_line(k, result, decision))
        final = benchmark_report(run, validator, config, log)
    finally:
        ray.kill(validator)
        stop_engineer(config)
        trainer.shutdown()
    from actors.report import write_report

    write_report(run.path)
    tracker.artifacts([run.report, run.benchmark, run.start.benchmark, *sorted(run.plots.glob("*.png"))])
    tracker.finish()
    return final


def round_line(k: int, result: ValidationResult, decision: Decision | None) -> str:
    """The one-line summary of a round: validation rates and what the engineer changed."""
    summary = result.table.summary()
    line = f"round {k} done: validation valid {summary['valid_rate']:.1%}, optimal {summary['optimal_rate']:.1%}"
    if decision is None:
        return line
    change = "; ".join(decision.changes) if decision.changes else f"no change ({decision.fallback or 'kept'})"
    return f"{line}; engineer ({decision.backend}): {change[:300]}"


def guard_round(path: Path, trainer, k: int, valid_rate: float, floor: float, log: Log) -> dict[str, Any]:
    """``revert_below_start`` after round ``k``: a validation valid rate below the start's (``floor``) undoes
    the round (the learners load the kept state: that of the last round which did not end below, or the
    start's); any other rate keeps the learners' state for the next revert. The learners are touched only
    while the trainer stands at the round's end: a resumed run redoes an interrupted guard (its checkpoint
    holds the round's own weights) and never one whose next round has begun. The record goes to ``path``."""
    at_round_end = trainer.state.round == k + 1 and trainer.state.step == 0
    if not at_round_end and path.exists():
        return read_json(path)
    record = {"round": k, "valid_rate": valid_rate, "floor": floor, "reverted": valid_rate < floor}
    if at_round_end and record["reverted"]:
        record["back_to_step"] = trainer.revert()
        log(f"round {k}: validation valid {valid_rate:.1%} is below the start's {floor:.1%}: undone, back to the "
            f"state of step {record['back_to_step']}")  # fmt: skip
    elif at_round_end:
        trainer.keep()
    path.write_text(json.dumps(record, indent=1))
    return record


def round_config(run: RunDir, k: int, proposed: EnvConfig | None) -> EnvConfig:
    """Round ``k``'s configuration: ``proposed``, written once as the resume record, or the one written
    before (``proposed`` is None only when resuming)."""
    path = run.round(k).env_config
    if not path.exists():
        save_config(proposed, path)
        return proposed
    return load_config(path)


def replay_set(run: RunDir, k: int, config: RunConfig, levels: list[Instance] | None) -> ReplaySet | None:
    """Round ``k``'s replay levels (plr-levels): ``levels``, written once as the resume record before the
    round's config, or the ones written before (``levels`` is None only when resuming); None without any."""
    path = run.round(k).levels
    if levels and not path.exists():
        write_instances(levels, path)
    if not path.exists():
        return None
    return ReplaySet(read_instances(path), config.engineer.levels.replay_probability)


def score_start(config: RunConfig, model: str, start: RunDir, log: Log) -> None:
    """The starting policy, before any RL, on the run's validation and benchmark instances: written as
    ``start/validation.json`` (round -1) and ``start/final/benchmark.json``; kept once done."""
    from serving.deployment import deploy, undeploy

    if start.benchmark.exists():
        return
    start.path.mkdir(parents=True, exist_ok=True)
    name = config.app_name("start")
    deploy(config.serving_config().model_copy(update={"model": model}), name, f"/{name}", follow_updates=False)
    validator = Validator.remote(name)
    try:
        validate_round(start.validation, validator, eval_instances(VALIDATION, config.validation), config, log, -1)
        benchmark_report(start, validator, config, log)
    finally:
        ray.kill(validator)
        undeploy(name)


def progress_bar():
    """A rich progress bar (count, elapsed, time left) that leaves nothing behind and stays quiet when the
    output is not a terminal."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, TimeRemainingColumn(), transient=True)


def score_with_progress(validator, instances: list, max_tokens: int, what: str, chunk: int = 64):
    """The validator's greedy scores of ``instances`` (table, verdicts, answers), asked chunk by chunk so
    that a progress bar counts the instances done."""
    table, verdicts, answers = FailureTable(), [], []
    with progress_bar() as progress:
        task = progress.add_task(what, total=len(instances))
        for start in range(0, len(instances), chunk):
            part = instances[start : start + chunk]
            part_table, part_verdicts, part_answers = ray.get(validator.score.remote(part, max_tokens))
            table.merge(part_table)
            verdicts += part_verdicts
            answers += part_answers
            progress.advance(task, len(part))
    return table, verdicts, answers


def train_with_progress(trainer, k: int, env: EnvConfig, steps: int, log: Log, replay: ReplaySet | None = None):
    """Train round ``k`` (with ``replay``'s levels mixed in) with a progress bar over its steps and a line per
    step."""
    with progress_bar() as progress:
        task = progress.add_task(f"round {k} GRPO", total=steps, completed=trainer.state.step)

        def on_step(record: dict) -> None:
            progress.advance(task)
            log(f"round {k} step {record['step']}: reward {record['reward_mean']:.3f} valid {record['valid_rate']:.1%}")

        trainer.train_round(k, env, on_step=on_step, replay=replay)


def validate_round(path: Path, validator, instances, config: RunConfig, log: Log, k: int) -> ValidationResult:
    """Greedy validation of the served policy after round ``k``, written to ``path`` once (read back when
    resuming)."""
    if path.exists():
        return ValidationResult.from_dict(read_json(path))
    when = f"round {k}" if k >= 0 else "before RL"
    table, verdicts, answers = score_with_progress(
        validator, instances, config.validation.max_tokens, f"{when} validation"
    )
    cases = failed_cases(instances, verdicts, answers, config.engineer.context_config().failed_examples)
    result = ValidationResult(k, table, cases)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_dict(), indent=1))
    if k < 0:  # a round's rates go into its one-line summary (round_line)
        summary = table.summary()
        log(f"before RL: validation valid {summary['valid_rate']:.1%}, optimal {summary['optimal_rate']:.1%}")
    return result


def propose(config: RunConfig, trainer, env: EnvConfig, result: ValidationResult, history,
            folder, engineer) -> Decision:  # fmt: skip
    """The engineer's decision for the next round from this round's evidence (saved in ``folder.engineer``)."""
    levels = ray.get(trainer.buffer.level_table.remote()) if config.engineer.backend == "plr-levels" else []
    inputs = EngineerInputs(
        round=result.round,
        config=env,
        validation=result.table,
        rollouts=trainer.rollout_failures(),
        levels=levels,
        step=trainer.state.global_step,
        failed_cases=result.failed_cases,
        history=history[:-1],  # earlier rounds; this one is the failure breakdown
        training=json.loads(config.grpo.model_dump_json()) | {"deepspeed": config.deepspeed.model_dump()},
        bookkeeping={
            "round": result.round,
            "steps_per_round": config.grpo.steps_per_round,
            "budget": env.num_instances,
        },
    )
    return ray.get(engineer.propose.remote(inputs, str(folder.engineer)))


def benchmark_report(run: RunDir, validator, config: RunConfig, log: Log) -> dict[str, Any]:
    if run.benchmark.exists():
        return read_json(run.benchmark)
    instances = eval_instances(BENCHMARK, config.benchmark)
    log(f"benchmark: {len(instances)} instances")
    _, verdicts, _ = score_with_progress(validator, instances, config.benchmark.max_tokens, "benchmark")
    table = score(instances, {v.id: v for v in verdicts})
    run.benchmark.parent.mkdir(parents=True, exist_ok=True)
    result = {"table": table.to_dict(), "markdown": table.to_markdown()}
    result |= {"scored": [i.id for i in instances]} | solved_ids(verdicts)  # for `envengineer compare`
    run.benchmark.write_text(json.dumps(result, indent=1))
    log("\n" + table.to_markdown())
    return result
