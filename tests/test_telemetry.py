"""The live metrics: the shipped Grafana dashboard plots exactly the metrics the run exports (the export
itself is checked on a real cluster in tests/test_job_submission.py)."""

import json
import re
from pathlib import Path

from actors.telemetry import GAUGES, RATES


def test_the_grafana_dashboard_plots_every_live_metric():
    dashboard = json.loads((Path(__file__).parents[1] / "dashboards" / "grafana.json").read_text())
    queried = {
        m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"ray_envengineer_\w+", t["expr"])
    }
    exported = {f"ray_envengineer_{name}" for name in [*GAUGES, *RATES]} | {"ray_envengineer_engineer_decisions_total"}
    assert queried == exported
