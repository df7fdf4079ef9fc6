"""Ray Tune sweeps: every trial is a whole run of the main job (rounds of GRPO -> validation -> engineer,
then the benchmark) for one (variant, seed).

A sweep file names a base run config, overrides for every trial, named variants (each a set of overrides:
an engineer backend, a context preset, training details full or bookkeeping, ...) and seeds. The grid is
variants x seeds. All trials start from one warm-started policy, built once by the sweep's driver.

Each trial reserves a placement group for what it runs inside the cluster (its learners and rollout
workers; the driver loop, buffer, engineer and validator need no CPU), and the sweep runs at most as many
trials at once as the cluster holds, counting each trial's Serve replicas too (they live in Serve's own
placement): nothing is oversubscribed. Files: ``DIR/tune/`` (Tune's experiment state and result files),
``DIR/sweep.json`` (the sweep file and ``--set`` assignments of the last start, for ``envengineer status``),
``DIR/runs/<variant>-s<seed>/`` (each trial's run directory), ``DIR/summary.md|csv|png``. ``--resume``
restores the experiment: finished trials are not rerun, unfinished and errored ones continue their run
directory from its last completed step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from actors.settings import RunConfig
from env.config import ConfigError
from tune.spec import Sweep, SweepConfig, load_sweep, merge, shared_start, trial_dir, trial_name

__all__ = ["Sweep", "SweepConfig", "load_sweep", "merge", "run_sweep", "trial_name"]


# ----------------------------------------------------------------------------------------------
# Resources


def trial_bundles(config: RunConfig) -> list[dict[str, float]]:
    """The trial's placement group: an empty head bundle (the trial's driver loop) and one bundle per
    learner and per rollout worker, exactly what those actors ask for."""
    r = config.resources
    learner = {"CPU": r.learner_cpus} | ({"GPU": r.learner_gpus} if r.learner_gpus else {})
    return [{}] + [dict(learner) for _ in range(r.learners)] + [{"CPU": r.worker_cpus}] * r.rollout_workers


def serve_resources(config: RunConfig) -> dict[str, float]:
    """What the trial's Serve replicas take outside its placement group (a second, frozen deployment for
    the ``base`` engineer)."""
    serving = config.serving_config()
    deployments = 2 if config.engineer.backend == "base" else 1
    replicas = serving.num_replicas * deployments
    return {"CPU": serving.num_cpus * replicas, "GPU": serving.num_gpus * replicas}


def trial_resources(config: RunConfig) -> dict[str, float]:
    """Everything one trial takes from the cluster."""
    total = dict(serve_resources(config))
    for bundle in trial_bundles(config):
        for key, value in bundle.items():
            total[key] = total.get(key, 0.0) + value
    return {k: v for k, v in total.items() if v}


def concurrency(cluster: dict[str, float], per_trial: list[dict[str, float]]) -> int:
    """How many of the largest trials fit the cluster at once (at least 1)."""
    largest: dict[str, float] = {}
    for need in per_trial:
        for key, value in need.items():
            largest[key] = max(largest.get(key, 0.0), value)
    fits = [math.floor(cluster.get(key, 0.0) / value + 1e-9) for key, value in largest.items() if value > 0]
    return max(1, min(fits, default=1))


# ----------------------------------------------------------------------------------------------
# Running


def run_trial(params: dict[str, Any], sweep: Sweep, out: str, model: str | None) -> None:
    """Tune's trainable: one whole run of the main job, reporting each round's validation and the final
    benchmark Sums. A restarted trial resumes its run directory."""
    from ray import tune

    from actors.job import run_job

    variant, seed = params["variant"], params["seed"]
    config = sweep.trial_config(variant, seed, model)
    run_dir = trial_dir(Path(out), variant, seed).path

    def on_round(k: int, summary: dict[str, Any]) -> None:
        tune.report({"round": k, "valid_rate": summary["valid_rate"], "optimal_rate": summary["optimal_rate"]})

    final = run_job(config, run_dir, log=lambda line: print(f"[{config.label}] {line}", flush=True), on_round=on_round,
                    tracking_group=Path(out).name, start=shared_start(Path(out)))  # fmt: skip
    sums = {f"acc_sum_{a}": row["sum"]["acc"] for a, row in final["table"].items()}
    sums |= {f"opt_sum_{a}": row["sum"]["opt"] for a, row in final["table"].items()}
    tune.report({"round": config.rounds, "done": True} | sums)


def trial_progress_class():
    """``TrialProgress``: a Tune callback drawing a progress bar over the sweep's trials (finished or failed,
    of all, with the time left); the bar is made in ``setup``, so the callback pickles with the experiment."""
    from ray import tune

    class TrialProgress(tune.Callback):
        def __init__(self, total: int):
            self.total, self.bar, self.task = total, None, None

        def setup(self, **info) -> None:
            from actors.job import progress_bar

            self.bar = progress_bar()
            self.task = self.bar.add_task("sweep trials", total=self.total)
            self.bar.start()

        def _advance(self) -> None:
            if self.bar is not None:
                self.bar.advance(self.task)

        def on_trial_complete(self, iteration, trials, trial, **info) -> None:
            self._advance()

        def on_trial_error(self, iteration, trials, trial, **info) -> None:
            self._advance()

        def on_experiment_end(self, trials, **info) -> None:
            if self.bar is not None:
                self.bar.stop()

    return TrialProgress


def starting_policy(base: RunConfig, shared: str | None) -> str | None:
    """The policy every trial starts from: the shared warm start if the sweep built one, else the base
    config's model folder when the trials do not warm-start it themselves (None: no common start)."""
    return shared or (base.model if not base.warm_start and Path(base.model).is_dir() else None)


def run_sweep(sweep: Sweep, out: str | Path, resume: bool = False, log=print) -> Path:
    """Run (or resume) the sweep into ``out`` on the connected Ray cluster; returns the summary's path."""
    import ray
    from ray import tune

    from actors.job import prepare_model, score_start
    from serving.deployment import start_serve
    from tune.summary import write_summary

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    network = sweep.base_config().network
    start_serve(network.serve_host, network.serve_port)  # before any trial deploys (a running Serve is kept)
    base = sweep.base_config()
    model = None
    if sweep.settings.shared_warm_start:
        model = prepare_model(base, out / "shared", log)
        log(f"all trials start from {model}")
    start = starting_policy(base, model)
    if sweep.settings.score_start and start:
        score_start(base, start, shared_start(out), log)  # the summary's "before RL" row
    configs = {key: sweep.trial_config(*key, model) for key in sweep.configs}
    needs = [trial_resources(c) for c in configs.values()]
    limit = sweep.settings.max_concurrent_trials or concurrency(ray.cluster_resources(), needs)
    log(f"{len(configs)} trials, at most {limit} at once (one trial takes {max(needs, key=lambda n: n['CPU'])})")

    def resources(params: dict[str, Any]):
        return tune.PlacementGroupFactory(trial_bundles(configs[params["variant"], params["seed"]]), strategy="PACK")

    TrialProgress = trial_progress_class()  # noqa: N806 - a class made where Tune is imported
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, sweep=sweep, out=str(out), model=model), resources=resources
    )
    experiment = out / "tune"
    if resume and tune.Tuner.can_restore(str(experiment)):
        tuner = tune.Tuner.restore(str(experiment), trainable, resume_unfinished=True, resume_errored=True)
    else:
        if experiment.exists():
            raise ConfigError(f"{experiment} holds a sweep; pass --resume to continue it or choose another --out")
        tuner = tune.Tuner(
            trainable,
            param_space={
                "variant": tune.grid_search(list(sweep.settings.variants)),
                "seed": tune.grid_search(list(sweep.settings.seeds)),
            },
            tune_config=tune.TuneConfig(max_concurrent_trials=limit),
            run_config=tune.RunConfig(
                name="tune", storage_path=str(out), verbose=1, callbacks=[TrialProgress(len(configs))]
            ),
        )
    results = tuner.fit()
    errors = [str(r.error).splitlines()[0] for r in results if r.error]
    for error in errors:
        log(f"trial failed: {error}")
    return write_summary(out, sweep)
