"""`envengineer samples`: the logged groups of a step with their boards, verdicts and answers, on a
hand-made samples.jsonl as the trainer writes it (actors.trajectory.TrajectoryBatch.sample_records)."""

import json
from pathlib import Path

import pytest

from actors.metrics import read_metrics
from actors.run_dir import RunDir
from actors.sample_view import NoSamples, describe_samples, redraw, select_groups
from actors.trajectory import TrajectoryBatch
from env.evaluate import evaluate
from tests.test_cli import cli
from tests.test_credit import ANSWER_ONLY, INSTANCE, WITH_THINK

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"

VALID = "<think>\nHoles: (1, 1)\n</think>\n<answer>\nAgent 0: RIGHT, RIGHT, DOWN, DOWN\nAgent 1: UP, UP, RIGHT, RIGHT\n"
VALID += "</answer>"  # the instance's optimal plan


def logged_batch() -> TrajectoryBatch:
    """One instance, three samples: a hole at agent 0's second move (twice, one with thinking), and a valid
    optimal plan; a second instance's group of one parse error."""
    batch = TrajectoryBatch(instance_ids=["hand", "other"], levels=[INSTANCE.model_dump(mode="json")])
    rows = [
        (0, ANSWER_ONLY, 0.0, "hole"),
        (0, WITH_THINK, 0.0, "hole"),
        (0, VALID, 1.5, None),
        (1, "?", 0.0, "parse_error"),
    ]
    for group, text, reward, failure in rows:
        batch.group.append(group)
        batch.text.append(text)
        batch.reward.append(reward)
        batch.failure.append(failure)
        batch.response_ids.append([1] * len(text))
        batch.finish_reason.append("stop" if failure != "parse_error" else "length")
    return batch


def write_samples(folder, steps=(0, 1)) -> None:
    rows = [{"global_step": s, "round": s // 2} | row for s in steps for row in logged_batch().sample_records(4)]
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_logged_group_carries_its_instance_and_prints_with_the_board_and_the_verifiers_detail(tmp_path):
    write_samples(tmp_path)
    rows = read_metrics(tmp_path / "samples.jsonl")
    assert rows[0]["level"]["id"] == "hand" and rows[1]["level"] is None  # a group without its instance as data
    text = describe_samples(tmp_path)
    assert text.splitlines()[0].endswith("step 1 (round 0) of steps 0..1, 2 group(s)")  # the newest step
    assert "hand: 3x3, 2 agents, 1 hole, optimal makespan 4" in text
    assert "0 . b\n  . H .\n  1 . a" in text  # the board: agents at their starts, letters their goals
    assert (
        "sample 0: reward 0.00, hole at t=2: agent 0 falls into the hole at (1, 1)" in text
        and "sample 2: reward 1.50, valid, optimal" in text
    )
    assert "Agent 0: RIGHT, DOWN, DOWN, RIGHT" in text and "<think>" not in text  # answers only by default
    assert (
        "other\n  sample 0: reward 0.00, parse_error (1 tokens, stopped: length)" in text
    )  # no instance: the category
    assert "Holes: (1, 1)" in describe_samples(tmp_path, thinking=True)


def test_a_failure_category_narrows_the_samples_and_drops_groups_left_empty(tmp_path):
    write_samples(tmp_path)
    rows = read_metrics(tmp_path / "samples.jsonl")
    holes = select_groups(rows, 0, "hole")
    assert [g["instance"] for g in holes] == ["hand"] and len(holes[0]["samples"]) == 2
    assert [len(g["samples"]) for g in select_groups(rows, 0, "valid")] == [1]
    assert select_groups(rows, 0, limit=1)[0]["instance"] == "hand"
    assert "step 0 (round 0) of steps 0..1, 1 group(s) with valid samples" in describe_samples(tmp_path, 0, "valid")


def test_nothing_to_show_is_a_clear_error(tmp_path):
    with pytest.raises(NoSamples, match="no logged samples"):
        describe_samples(tmp_path)
    with pytest.raises(NoSamples, match="unknown failure category 'holes'"):
        describe_samples(tmp_path, failure="holes")
    write_samples(tmp_path)
    with (tmp_path / "samples.jsonl").open("a") as log:
        log.write('{"global_step": 2, "samp')  # a line the run is still writing
    assert "steps 0..1" in describe_samples(tmp_path)
    missing = cli("samples", tmp_path, "--step", 7, check=False)
    assert missing.returncode == 2 and "step 7 logged no samples (steps 0..1 did)" in " ".join(missing.stderr.split())
    shown = cli("samples", tmp_path, "--failure", "valid", "--groups", 1)
    assert "valid, optimal" in shown.stdout and "hole:" not in shown.stdout


def test_groups_logged_without_their_instance_are_drawn_again_from_the_rounds_configuration():
    """A committed run's records (before groups carried their instance): every group's instance drawn again
    from its id gives the verdicts the trainer logged."""
    run = RunDir(RESULTS / "grpo-lift-fp32")
    rows = read_metrics(run.samples)[::40]
    for row in rows:
        instance = redraw(run, row["instance"])
        assert instance is not None and instance.id == row["instance"]
        assert [evaluate(instance, s["text"]).failure for s in row["samples"]] == [s["failure"] for s in row["samples"]]
    assert redraw(run, "probe-0-3-0001") is None and redraw(run, "rollout-99-0-0-0000") is None
    text = describe_samples(run.path, step=143, limit=1)
    assert "rollout-11-11-0-0000: " in text and "digits: agents (starts)" in text
