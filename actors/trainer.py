"""The GRPO driver: one process that coordinates the rollout workers, the buffer, the learner group and
the Serve deployment through a round of K steps.

A step: every worker draws its share of instances, samples G responses each from the deployment, scores
them and hands the batch to the buffer; the driver takes the step's references from the buffer and the
learners fetch the data and train; rank 0 publishes the new weights to every replica. Data never passes
through the driver. With ``grpo.overlap`` the next step's rollouts run while the learners train, with
the weights of the step before (exactly one step off-policy, so still deterministic).

Each step's metrics (reward, valid/optimal rates, failure breakdown, tokens/s, weight-version lag and the
time of each part) go to ``metrics.jsonl`` and TensorBoard. Checkpoints are written at the end of every
round and every ``checkpoint.every_steps`` steps; ``resume()`` continues from the newest one and draws
exactly the batches the interrupted run would have drawn.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from actors import checkpoint
from actors.buffer import TrajectoryBuffer
from actors.checkpoint import TrainState
from actors.learner import LearnerGroupBroken, start_policy
from actors.level_replay import ReplaySet
from actors.metrics import MetricsLog, keep_through
from actors.rollout_worker import RolloutWorker
from actors.run_dir import RunDir
from actors.sample_view import describe_group
from actors.settings import TrainConfig, run_namespace
from actors.telemetry import Telemetry
from actors.timing import Stages
from actors.tracking import Tracker
from actors.trajectory import RolloutSummary, TrajectoryBatch
from env.config import EnvConfig, split_by_ratios
from env.evaluate import FAILURE_CATEGORIES
from env.stats import FailureTable
from serving.settings import SamplingConfig

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, config: TrainConfig, deployment: str = "policy"):
        from serving.deployment import registry_name_of, start_serve

        self.config = config
        self.run_dir = Path(config.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.namespace = run_namespace(config.label)
        self.telemetry = Telemetry(config.label)
        resources = config.resources
        deployment = config.app_name(deployment)
        start_serve(config.network.serve_host, config.network.serve_port)  # kept as it is if already running
        self.buffer = TrajectoryBuffer.options(name="buffer", namespace=self.namespace).remote()
        self.policy, self.learners = start_policy(config, deployment, config.grpo.learning_rate, self.namespace)
        self.registry = registry_name_of(deployment)
        worker_options = {
            "num_cpus": resources.worker_cpus,
            "max_restarts": resources.max_restarts,
            "max_task_retries": resources.max_restarts,  # a dead worker's batch is drawn again
        }
        reward = config.grpo.reward
        self.workers = [
            RolloutWorker.options(name=f"rollout-{i}", namespace=self.namespace, **worker_options).remote(
                i, deployment, self.buffer, reward
            )
            for i in range(resources.rollout_workers)
        ]
        self.state = TrainState()
        self.metrics: MetricsLog | None = None
        self.tracker: Tracker | None = None  # W&B / MLflow, set by whoever started them (actors.tracking)
        self.resumed_from: Path | None = None

    # ------------------------------------------------------------------------------------------
    # Checkpoints

    def resume(self) -> bool:
        """Continue from the newest complete checkpoint of the run directory (False if there is none)."""
        for folder in checkpoint.complete(self.run_dir):
            try:
                self.state, buffer_state = checkpoint.read(folder)
                self.learners.call("load", str(folder))
                break
            except (checkpoint.CheckpointError, ray.exceptions.RayTaskError) as error:
                log.warning("skipping checkpoint %s: %s", folder, str(error).splitlines()[-1])
        else:
            if checkpoint.complete(self.run_dir):
                raise checkpoint.CheckpointError(f"no readable checkpoint in {self.run_dir / 'checkpoints'}")
            self._open_records(resume_after=-1)
            return False
        self.resumed_from = folder
        ray.get(self.buffer.load_state.remote(buffer_state))
        if self.state.version > 0:  # the deployment starts from the initial model: give it the learner's weights
            self._publish(self.state.version)
        self._open_records(resume_after=self.state.global_step - 1)
        log.info("resumed from %s (round %d, step %d)", folder, self.state.round, self.state.step)
        return True

    def save_checkpoint(self) -> Path:
        folder = checkpoint.folder_for(self.run_dir, self.state.global_step)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.learners.call("save", str(folder))
        except (OSError, ray.exceptions.RayTaskError, LearnerGroupBroken) as error:
            free = shutil.disk_usage(self.run_dir).free / 2**20
            shutil.rmtree(folder, ignore_errors=True)  # incomplete: free its space, keep the previous one
            if isinstance(error, LearnerGroupBroken) and isinstance(error.__cause__, ray.exceptions.RayActorError):
                raise  # a rank died while saving: not a disk problem; the run resumes from the previous one
            cause = error.__cause__ if isinstance(error, LearnerGroupBroken) else error
            message = f"could not write checkpoint {folder} ({free:.1f} MiB were free on its disk): "
            message += f"{str(cause).splitlines()[-1]}; kept {checkpoint.latest(self.run_dir)}"
            if isinstance(error, LearnerGroupBroken):
                message += "; the learners stopped: free space, then rerun with --resume"
            raise checkpoint.CheckpointError(message) from error
        buffer_state = ray.get(self.buffer.state.remote())
        checkpoint.write(folder, self.state, buffer_state, self.config.checkpoint.keep)
        return folder

    # ------------------------------------------------------------------------------------------
    # The validation guard (RunConfig.revert_below_start; actors.job.guard_round)

    def _kept(self) -> Path:
        """``kept/`` in the run directory (put back from ``kept.old`` if a replacement stopped between its
        two renames)."""
        kept = RunDir(self.run_dir).kept
        old = kept.with_name("kept.old")
        if not kept.exists() and (old / "state.json").exists():
            old.rename(kept)
        return kept

    def keep(self) -> None:
        """Keep the learners' current state (weights, optimizer, RNG) as the one ``revert`` returns to:
        ``kept/``, replaced whole once the new copy is complete."""
        kept = self._kept()
        fresh, old = kept.with_name("kept.new"), kept.with_name("kept.old")
        for folder in (fresh, old):
            shutil.rmtree(folder, ignore_errors=True)
        fresh.mkdir(parents=True)
        self.learners.call("save", str(fresh))
        (fresh / "state.json").write_text(json.dumps({"global_step": self.state.global_step}))
        if kept.exists():
            kept.rename(old)
        fresh.rename(kept)
        shutil.rmtree(old, ignore_errors=True)

    def revert(self) -> int:
        """Back to the kept state: the learners load ``kept/`` and the deployment serves it as a new weight
        version (the step counters go on). Returns the global step the kept state was taken at."""
        kept = self._kept()
        self.learners.call("load", str(kept))
        self.state.version += 1
        self._publish(self.state.version)
        return json.loads((kept / "state.json").read_text())["global_step"]

    # ------------------------------------------------------------------------------------------
    # Steps

    def _publish(self, version: int) -> dict[str, float]:
        timeout = 600.0
        return self.learners.call("publish", self.registry, version, self.config.serving_config().num_replicas, timeout)

    def _shares(self, prompts: int) -> dict[int, int]:
        """Instances per rollout worker for a draw of ``prompts`` (workers with none left out)."""
        shares = split_by_ratios(prompts, dict.fromkeys(range(len(self.workers)), 1.0))
        return {worker: share for worker, share in shares.items() if share > 0}

    def _launch(
        self,
        env: EnvConfig,
        round_index: int,
        step: int,
        global_step: int,
        prompts: int | None = None,
        attempt: int = 0,
        replay: ReplaySet | None = None,
    ) -> list[ray.ObjectRef]:
        """Start a step's rollouts (draw ``attempt``: 0, or a refill of ``prompts`` instances) unless the buffer
        already holds them (restored from a checkpoint)."""
        grpo = self.config.grpo
        shares = self._shares(prompts or grpo.prompts_per_step)
        if ray.get(self.buffer.ready.remote(global_step, attempt)) == sorted(shares):
            return []
        sampling = SamplingConfig(
            n=grpo.group_size, temperature=grpo.temperature, top_p=grpo.top_p, max_tokens=grpo.max_tokens
        )
        return [
            self.workers[w].collect.remote(env, round_index, step, global_step, share, sampling, attempt, replay)
            for w, share in shares.items()
        ]

    def _refill(self, env: EnvConfig, round_index: int, step: int, global_step: int, refs: list,
                summaries: list[RolloutSummary], replay: ReplaySet | None = None):  # fmt: skip
        """Dynamic sampling: while the step has fewer groups with signal than ``prompts_per_step``, draw that
        many more instances (at most ``grpo.refill`` times); returns all references and the workers'
        summaries of each draw, one list a draw (the step's own, then its refills: they run one after another)."""
        grpo = self.config.grpo
        draws = [summaries]
        for attempt in range(1, grpo.refill + 1):
            missing = grpo.prompts_per_step - sum(s.signal_groups for draw in draws for s in draw)
            if missing <= 0:
                break
            ray.get(self._launch(env, round_index, step, global_step, missing, attempt, replay))
            more_refs, more = ray.get(self.buffer.take.remote(global_step, list(self._shares(missing)), attempt))
            refs = refs + more_refs
            draws.append(more)
        return refs, draws

    def train_round(
        self,
        round_index: int,
        env: EnvConfig,
        steps: int | None = None,
        on_step: Callable[[dict], None] | None = None,
        replay: ReplaySet | None = None,
    ) -> list[dict[str, Any]]:
        """Run (the rest of) round ``round_index`` on ``env`` (with ``replay``'s levels mixed in, if given):
        ``steps`` (default ``grpo.steps_per_round``) GRPO steps; returns the steps' metric records (also handed
        to ``on_step`` as each ends). Checkpoints at the end of the round."""
        if self.metrics is None:
            self.resume()
        steps = steps or self.config.grpo.steps_per_round
        if self.state.round > round_index:
            return []
        if self.state.round < round_index:
            self.state.round, self.state.step = round_index, 0
        records = []
        pending = None
        while self.state.round == round_index:
            step, global_step = self.state.step, self.state.global_step
            stages = Stages()
            with stages("wall"):
                with stages("rollout"):
                    ray.get(
                        pending
                        if pending is not None
                        else self._launch(env, round_index, step, global_step, replay=replay)
                    )
                    workers = list(self._shares(self.config.grpo.prompts_per_step))
                    refs, summaries = ray.get(self.buffer.take.remote(global_step, workers))
                    refs, draws = self._refill(env, round_index, step, global_step, refs, summaries, replay)
                pending = None
                if self.config.grpo.overlap and step + 1 < steps:
                    pending = self._launch(env, round_index, step + 1, global_step + 1, replay=replay)
                with stages("train"):
                    train = self.learners.call("train_grpo", refs, self.config.grpo)
                with stages("wait_next"):
                    if pending:
                        ray.get(pending)  # the next batch is drawn entirely with the weights it started with
                trained_version = self.state.version
                sync = {"gather": 0.0, "load": 0.0}
                with stages("sync"):
                    if not train.get("skipped"):
                        self.state.version += 1
                        sync = self._publish(self.state.version)
            self.state.step += 1
            self.state.global_step += 1
            times = {key: stages.seconds[key] for key in ("rollout", "train", "wait_next", "sync", "wall")}
            record = step_record(round_index, step, global_step, draws, train, sync, times, trained_version)
            record["weight_version"] = self.state.version
            record["refills"] = len(draws) - 1
            self.metrics.write(record, global_step)
            if self.tracker:
                self.tracker.step(record)
            self.telemetry.step(record)
            records.append(record)
            if self.config.grpo.log_samples:
                self._log_samples(round_index, global_step, refs)
            if on_step:
                on_step(record)
            every = self.config.checkpoint.every_steps
            if self.state.step == steps:
                self.state.round, self.state.step = round_index + 1, 0
                self.save_checkpoint()
            elif every and self.state.global_step % every == 0:
                self.save_checkpoint()
        return records

    def _open_records(self, resume_after: int) -> None:
        """Open the step records, dropping those after step ``resume_after`` (they are produced again)."""
        self.metrics = MetricsLog(self.run_dir, resume_after=resume_after)
        keep_through(RunDir(self.run_dir).samples, resume_after)

    def _log_samples(self, round_index: int, global_step: int, refs: list[ray.ObjectRef]) -> None:
        """Append the step's first ``grpo.log_samples`` groups (texts, rewards, verdicts) to samples.jsonl."""
        rows = TrajectoryBatch.merge(ray.get(refs)).sample_records(self.config.grpo.log_samples)
        with RunDir(self.run_dir).samples.open("a") as out:
            for row in rows:
                out.write(json.dumps({"global_step": global_step, "round": round_index} | row) + "\n")
        if self.tracker and rows:  # the first group beside the step's curves
            self.tracker.samples(describe_group(rows[0]), global_step)

    def rollout_failures(self) -> FailureTable:
        """The failure table of every rollout trained on so far (the engineer's training evidence)."""
        return ray.get(self.buffer.failure_table.remote())

    def shutdown(self, undeploy: bool = True) -> None:
        from serving.deployment import undeploy as remove

        if self.metrics:
            self.metrics.close()
        for worker in self.workers:
            ray.kill(worker)
        self.learners.shutdown()
        ray.kill(self.buffer)
        if undeploy:
            remove(self.policy.name)


def step_record(
    round_index: int,
    step: int,
    global_step: int,
    draws: list[list[RolloutSummary]],
    train: dict,
    sync: dict,
    times: dict[str, float],
    trained_version: int,
) -> dict[str, Any]:
    """One step's metrics from the workers' summaries (one list a draw: the step's own, then its refills),
    the learners' statistics and the driver's clocks.

    Within a draw the workers run in parallel, so each rollout part's time is the slowest worker's; the
    draws run one after another, so their parts add up. Ray overhead is the step's wall time minus its parts
    (sample, generate, score, train, sync)."""
    summaries = [s for draw in draws for s in draw]
    samples = sum(s.samples for s in summaries)
    failures = Counter()
    for s in summaries:
        failures.update(s.failures)
    parts = {key: sum(max(s.times[key] for s in draw) for draw in draws) for key in ("sample", "generate", "score")}
    parts |= {"train": times["train"], "sync": sync["gather"] + sync["load"]}
    versions = [v for s in summaries for v in s.weight_versions]
    n = max(samples, 1)
    return {
        "round": round_index,
        "step": step,
        "global_step": global_step,
        "reward_mean": sum(s.reward_sum for s in summaries) / n,
        "valid_rate": sum(s.valid for s in summaries) / n,
        "optimal_rate": sum(s.optimal for s in summaries) / n,
        "failures": {c: failures[c] / n for c in FAILURE_CATEGORIES},
        "samples": samples,
        "instances": sum(s.instances for s in summaries),
        "replayed": sum(s.replayed for s in summaries),  # instances taken from the round's replay set
        "prompt_tokens": sum(s.prompt_tokens for s in summaries),
        "response_tokens": sum(s.response_tokens for s in summaries),
        "tokens_per_s": sum(s.response_tokens for s in summaries) / max(parts["generate"], 1e-9),
        "samples_per_s": samples / max(times["wall"], 1e-9),
        "version_lag": trained_version - min(versions, default=trained_version),
        "digests": [s.digest for s in summaries],
        "train": train,
        "time": parts | times | {"ray_overhead": times["wall"] - sum(parts.values())},
    }
