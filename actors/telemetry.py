"""Live metrics of a run for the Ray dashboard and Prometheus, through ``ray.util.metrics``.

Ray exports them from every process on its node's metrics port as ``ray_envengineer_*`` (counters end in
``_total``), tagged with the run's label; ``dashboards/grafana.json`` plots them. The same numbers are in
the run's ``metrics.jsonl`` and validation reports: these are the live view, those the record.
"""

from __future__ import annotations

from typing import Any

from ray.util.metrics import Counter, Gauge

GAUGES = {
    "round": "current round of the run",
    "step": "GRPO steps done (global step)",
    "reward": "mean rollout reward of the last step",
    "tokens_per_second": "response tokens per second of generation in the last step",
    "weight_version": "weights version served by the policy deployment",
}
RATES = {
    "valid_rate": "share of valid plans (split=train: the last step's rollouts; split=validation: held-out)",
    "optimal_rate": "share of optimal plans (split=train: the last step's rollouts; split=validation: held-out)",
}


class Telemetry:
    """The run's gauges and counters; create one per driver (or actor) that reports."""

    def __init__(self, run: str):
        self.tags = {"run": run or "default"}
        self.gauges = {name: Gauge(f"envengineer_{name}", text, ("run",)) for name, text in GAUGES.items()}
        self.rates = {name: Gauge(f"envengineer_{name}", text, ("run", "split")) for name, text in RATES.items()}
        self.decisions = Counter(
            "envengineer_engineer_decisions",
            "engineer decisions, by backend and outcome (changed, unchanged, kept_previous)",
            tag_keys=("run", "backend", "outcome"),
        )

    def _set(self, name: str, value: float, **tags: str) -> None:
        gauge = self.gauges.get(name) or self.rates[name]
        gauge.set(float(value), tags=self.tags | tags)

    def step(self, record: dict[str, Any]) -> None:
        """A GRPO step's record (``actors.trainer.step_record``)."""
        self._set("round", record["round"])
        self._set("step", record["global_step"] + 1)
        self._set("reward", record["reward_mean"])
        self._set("tokens_per_second", record["tokens_per_s"])
        self._set("weight_version", record["weight_version"])
        self._set("valid_rate", record["valid_rate"], split="train")
        self._set("optimal_rate", record["optimal_rate"], split="train")

    def validation(self, round_index: int, summary: dict[str, Any]) -> None:
        """A round's held-out validation summary (``FailureTable.summary``)."""
        self._set("round", round_index)
        self._set("valid_rate", summary["valid_rate"], split="validation")
        self._set("optimal_rate", summary["optimal_rate"], split="validation")

    def decision(self, backend: str, changed: bool, kept_previous: bool) -> None:
        outcome = "kept_previous" if kept_previous else "changed" if changed else "unchanged"
        self.decisions.inc(1, tags=self.tags | {"backend": backend, "outcome": outcome})
