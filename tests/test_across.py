"""tune.across: trials of several sweeps side by side, each against its own sweep's starting policy."""

import csv
from pathlib import Path

import pytest

from tune.across import main, ranks, read_trials, spearman

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
COLUMNS = ["variant", "seed", "status", "acc_sum_3", "acc_sum_4", "undone", "precision"]
COLUMNS += ["rollout_valid_r0", "rollout_signal_r0", "rollout_valid_r1", "rollout_signal_r1"]


def write_summary(folder, rows):
    folder.mkdir()
    with (folder / "summary.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return folder


def trial(variant, seed, acc3, signal0, signal1, undone="[]", status="done"):
    return {"variant": variant, "seed": seed, "status": status, "acc_sum_3": acc3, "acc_sum_4": 0.15,
            "undone": undone, "precision": "bf16", "rollout_valid_r0": 0.2, "rollout_signal_r0": signal0,
            "rollout_valid_r1": 0.25, "rollout_signal_r1": signal1}  # fmt: skip


def test_each_trial_is_measured_against_its_own_sweeps_start(tmp_path):
    one = write_summary(tmp_path / "one", [
        {"variant": "before RL", "seed": "-", "status": "done", "acc_sum_3": 0.25, "acc_sum_4": 0.14},
        trial("a", 0, 0.30, 0.5, 0.7),
        trial("a", 1, "", 0.4, "", status="incomplete"),  # unfinished trials are left out
    ])  # fmt: skip
    (found,) = read_trials(one)
    assert found.gain[3] == pytest.approx(5.0) and found.gain[4] == pytest.approx(1.0)
    assert (found.rounds, found.undone, found.signal_r0, found.signal_mean) == (2, 0, 50.0, pytest.approx(60.0))
    two = write_summary(tmp_path / "two", [
        {"variant": "before RL", "seed": "-", "status": "done", "acc_sum_3": 0.20, "acc_sum_4": 0.10},
        trial("b", 0, 0.19, 0.3, 0.3, undone="[0, 1]"),
        trial("b", 1, 0.22, 0.45, 0.5),
    ])  # fmt: skip
    main([str(one), str(two), "--out", str(tmp_path / "across.md")])
    table = (tmp_path / "across.md").read_text()
    lines = [line for line in table.splitlines() if line.startswith("| one") or line.startswith("| two")]
    assert [line.split(" | ")[3] for line in lines] == ["+5.0", "+2.0", "-1.0"]  # sorted by the 3-agent change
    assert "Spearman rank correlation with the 3-agent change (3 trials)" in table
    assert table.rstrip().endswith("| - | +1.00 | +1.00 | -0.87 |")  # every valid rate is 20%: no correlation


def test_a_summary_without_a_start_row_is_a_clear_error(tmp_path):
    folder = write_summary(tmp_path / "no-start", [trial("a", 0, 0.3, 0.5, 0.5)])
    with pytest.raises(ValueError, match="no 'before RL' row"):
        read_trials(folder)


def test_ranks_share_ties_and_spearman_reads_order_only():
    assert ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_the_committed_table_is_what_the_committed_summaries_give(tmp_path, capsys):
    """docs/results/across-144-steps.md is tune.across's output on the five sweeps docs/results.md names."""
    sweeps = ["guard-12", "guard-12-random", "group-random", "random-holes", "random-shares"]
    main([str(RESULTS / f"sweep-grpo-{name}") for name in sweeps])
    assert capsys.readouterr().out == (RESULTS / "across-144-steps.md").read_text()
