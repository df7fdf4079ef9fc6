"""GRPO core and run bookkeeping, without Ray: advantages, loss, micro-batch equivalence, failure tables,
checkpoint folders, metrics on resume, training configs."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from actors import checkpoint
from actors.grpo import (
    by_length,
    clipped_surrogate,
    collate,
    group_advantages,
    informative_groups,
    shared_micro_batches,
    token_logprobs,
    weigh_negatives,
)
from actors.metrics import MetricsLog, keep_through, read_metrics
from actors.settings import TrainConfig, load_train_config
from actors.trajectory import TrajectoryBatch
from env.config import ConfigError, default_config
from env.evaluate import evaluate
from env.generator import sample_specs
from env.stats import FailureTable


def test_negative_weight_scales_only_the_negative_advantages():
    advantages = np.array([1.5, -0.5, -1.0, 0.0])
    assert list(weigh_negatives(advantages, 0.25)) == [1.5, -0.125, -0.25, 0.0]
    assert list(weigh_negatives(advantages, 1.0)) == list(advantages)
    assert list(weigh_negatives(advantages, 0.0)) == [1.5, 0.0, 0.0, 0.0]


def test_rows_are_ordered_longest_first_so_micro_batches_pad_little():
    lengths = {0: 150, 1: 257, 2: 152, 3: 250, 4: 150}
    ordered = by_length(np.array([0, 1, 2, 3, 4]), lengths)
    assert ordered == [1, 3, 2, 0, 4]

    def padded(order: list[int]) -> int:  # tokens computed in micro-batches of 2
        return sum(max(lengths[r] for r in order[k : k + 2]) * len(order[k : k + 2]) for k in range(0, len(order), 2))

    assert padded(ordered) == 257 * 2 + 152 * 2 + 150 < padded([0, 1, 2, 3, 4])


def test_group_advantages_are_centred_per_group_and_optionally_scaled():
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    centred = group_advantages(rewards, groups, scale_by_std=False)
    assert np.allclose(centred[:4], [0.75, -0.25, -0.25, -0.25]) and np.allclose(centred[4:], 0)
    scaled = group_advantages(rewards, groups, scale_by_std=True)
    assert np.allclose(scaled[:4], centred[:4] / np.std(rewards[:4]), atol=1e-5)
    assert list(informative_groups(rewards, groups)) == [True] * 4 + [False] * 4


def test_clipped_surrogate_on_policy_is_minus_advantage_per_token_and_clips():
    batch = collate([[1, 2, 3]], [[4, 5]], [[-1.0, -2.0]], [2.0], pad_id=0)
    loss, stats = clipped_surrogate(batch.old_logprobs.clone(), batch, 0.2, 0.2)
    assert loss.item() == pytest.approx(-4.0) and stats["clipped_tokens"] == 0
    higher = batch.old_logprobs + 1.0  # ratio e > 1.2: clipped for a positive advantage
    loss, stats = clipped_surrogate(higher, batch, 0.2, 0.2)
    assert loss.item() == pytest.approx(-2 * 1.2 * 2.0) and stats["clipped_tokens"] == 2


def test_token_logprobs_match_a_per_sequence_computation(tiny_model):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    prompts, responses = [[1, 7, 9, 11], [1, 5]], [[12, 13, 14], [20]]
    batch = collate(prompts, responses, None, None, pad_id=0)
    with torch.no_grad():
        padded = token_logprobs(model, batch)
        for row, (prompt, response) in enumerate(zip(prompts, responses)):
            logits = model(input_ids=torch.tensor([prompt + response])).logits[0]
            expected = logits.log_softmax(-1)[len(prompt) - 1 : -1].gather(-1, torch.tensor(response)[:, None])[:, 0]
            assert torch.allclose(padded[row, : len(response)], expected, atol=1e-5)


def test_micro_batched_token_mean_gradient_equals_the_whole_batch(tiny_model):
    """What a learner rank does (loss sums / the batch's token count, over micro-batches and zero-weight
    padding rows) gives the gradient of one token-mean loss over the whole batch."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(5, 300, size=rng.integers(3, 9))) for _ in range(5)]
    responses = [list(rng.integers(5, 300, size=rng.integers(1, 6))) for _ in range(5)]
    old = [list(rng.normal(-3, 0.5, size=len(r))) for r in responses]
    advantages = list(rng.normal(size=5))
    tokens = sum(map(len, responses))

    def gradient(groups):
        model.zero_grad()
        for rows, weights in groups:
            batch = collate(
                [prompts[i] for i in rows], [responses[i] for i in rows], [old[i] for i in rows],
                [advantages[i] for i in rows], 0, weights,
            )  # fmt: skip
            loss, _ = clipped_surrogate(token_logprobs(model, batch), batch, 0.2, 0.28)
            (loss / tokens).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    whole = gradient([([0, 1, 2, 3, 4], None)])
    split = gradient([([0, 1], None), ([2, 3], None), ([4], None), ([0], [0.0])])
    assert torch.allclose(whole, split, atol=1e-6)


def test_shared_prompts_give_the_plain_logprobs_entropies_and_gradients(tiny_model):
    """Each prompt computed once, its group's responses on its cached keys and values: the same numbers as
    one full sequence per sample (prompts of different lengths, responses of different lengths, a
    zero-weight row)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    rng = np.random.default_rng(1)
    distinct = [list(rng.integers(5, 300, size=n)) for n in (7, 4, 9)]
    prompts = [distinct[k] for k in (0, 0, 0, 1, 1, 2, 2, 2)]
    responses = [list(rng.integers(5, 300, size=rng.integers(1, 7))) for _ in prompts]
    old = [list(rng.normal(-3, 0.5, size=len(r))) for r in responses]
    advantages = list(rng.normal(size=len(prompts)))
    weights = [1.0] * 7 + [0.0]

    def run(share: bool):
        model.zero_grad()
        batch = collate(prompts, responses, old, advantages, 0, weights, share_prompts=share)
        logprobs, entropies = token_logprobs(model, batch, entropy=True)
        loss, _ = clipped_surrogate(logprobs, batch, 0.2, 0.28)
        loss.backward()
        gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return batch, logprobs.detach(), entropies, gradient

    plain, shared = run(False), run(True)
    assert shared[0].prompts.ids.shape[0] == 3 and shared[0].input_ids.shape[1] == max(map(len, responses))
    mask = plain[0].response_mask > 0
    for a, b in zip(plain[1:3], shared[1:3]):
        assert torch.allclose(a[mask], b[mask], atol=1e-5)
    assert torch.allclose(plain[3], shared[3], atol=1e-5)


def test_shared_micro_batches_keep_groups_whole_and_ranks_in_step():
    prompt_of = {row: ("abc"[row // 4],) for row in range(12)}  # three groups of 4
    rows = np.arange(12)
    assert shared_micro_batches(rows, prompt_of, 8, 0, 1) == [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11]]
    assert shared_micro_batches(rows, prompt_of, 3, 0, 1) == [[0, 1, 2], [3], [4, 5, 6], [7], [8, 9, 10], [11]]
    first, second = (shared_micro_batches(rows, prompt_of, 8, rank, 2) for rank in (0, 1))
    assert first == [[0, 1, 2, 3, 8, 9, 10, 11]] and second == [[4, 5, 6, 7]]
    lonely = shared_micro_batches(np.arange(4), prompt_of, 8, 1, 2)  # one group, two ranks
    assert lonely == [[]]
    longer_first = {0: (1,), 1: (1,), 2: (1, 2), 3: (1, 2)}
    assert shared_micro_batches(np.arange(4), longer_first, 2, 0, 1) == [[2, 3], [0, 1]]


def test_merged_worker_batches_keep_groups_apart():
    first = TrajectoryBatch(instance_ids=["a", "b"], group=[0, 0, 1, 1], reward=[1, 0, 1, 1])
    second = TrajectoryBatch(instance_ids=["c"], group=[0, 0], reward=[0, 1])
    merged = TrajectoryBatch.merge([first, second])
    assert merged.group == [0, 0, 1, 1, 2, 2] and merged.reward == [1, 0, 1, 1, 0, 1]
    assert merged.sample_instance_ids() == ["a", "a", "b", "b", "c", "c"]


def test_failure_table_counts_merges_and_round_trips(small_instances):
    table = FailureTable()
    for instance in small_instances[:10]:
        table.add(instance, evaluate(instance, "no answer"))
        table.add(instance, evaluate(instance, f"<answer>\n{_answer(instance)}\n</answer>"))
    summary = table.summary()
    assert summary["responses"] == 20 and summary["valid_rate"] == 0.5 and summary["failures"]["parse_error"] == 0.5
    again = FailureTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again.to_dict() == table.to_dict()
    assert again.merge(table).summary()["responses"] == 40
    assert sum(cell.total for cell in table.by("size").values()) == 20


def _answer(instance):
    return "\n".join(f"Agent {i}: {', '.join(m)}" for i, m in enumerate(instance.solution))


def test_rollout_specs_depend_only_on_config_seed_and_step():
    config = default_config(num_agents=2, num_instances=100, seed=3)
    assert sample_specs(config, 8, 0, 1, 2) == sample_specs(config, 8, 0, 1, 2)
    assert sample_specs(config, 8, 0, 1, 2) != sample_specs(config, 8, 0, 1, 3)
    assert {s.size for s in sample_specs(config, 200, 0, 0, 0)} == set(config.sizes)


def test_checkpoint_folders_latest_and_pruning(tmp_path):
    for step in (2, 4, 6):
        folder = checkpoint.folder_for(tmp_path, step)
        folder.mkdir(parents=True)
        checkpoint.write(folder, checkpoint.TrainState(global_step=step), {"taken": [step]}, keep=2)
    checkpoint.folder_for(tmp_path, 8).mkdir()  # a checkpoint interrupted before state.json: ignored
    latest = checkpoint.latest(tmp_path)
    assert latest.name == "step-000006"
    state, buffer = checkpoint.read(latest)
    assert state.global_step == 6 and buffer == {"taken": [6]}
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == [
        "step-000004", "step-000006", "step-000008",
    ]  # fmt: skip


def test_metrics_on_resume_drop_steps_after_the_checkpoint(tmp_path):
    log = MetricsLog(tmp_path)
    for step in range(5):
        log.write({"global_step": step, "reward_mean": step / 10, "time": {"wall": 1.0}}, step)
    log.close()
    resumed = MetricsLog(tmp_path, resume_after=2)
    resumed.write({"global_step": 3, "reward_mean": 0.0}, 3)
    resumed.close()
    assert [r["global_step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]
    assert list((tmp_path / "tensorboard").glob("events.*"))
    samples = tmp_path / "samples.jsonl"  # the logged samples are cut back the same way (the trainer does both)
    samples.write_text("".join(json.dumps({"global_step": s, "text": "x"}) + "\n" for s in (0, 1, 2, 3, 4)))
    keep_through(samples, 2)
    assert [r["global_step"] for r in read_metrics(samples)] == [0, 1, 2]
    keep_through(tmp_path / "absent.jsonl", 2)
    assert not (tmp_path / "absent.jsonl").exists()


def test_training_config_rejects_unknown_keys_and_bad_serving_fields(tmp_path):
    good = {"model": "m", "env": default_config().to_dict()}
    assert TrainConfig.model_validate(good).serving_config().model == "m"
    path = tmp_path / "train.yaml"
    for bad in ({"grpo": {"group_sise": 4}}, {"serving": {"replicas": 2}}, {"grpo": {"group_size": 1}}):
        path.write_text(json.dumps(good | bad))
        with pytest.raises(ConfigError, match="invalid training config"):
            load_train_config(path)
    path.write_text("model: [unclosed")
    with pytest.raises(ConfigError, match="cannot read"):
        load_train_config(path)


def test_set_assignments_change_nested_settings_and_the_schema_checks_them(tmp_path):
    from actors.settings import changed_settings, load_run_config, set_values

    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"model": "m", "env": default_config().to_dict()}))
    sizes = list(default_config().sizes)
    assignments = ["grpo.learning_rate=1e-5", f"env.sizes.{sizes[0]}.hole_ratio=0.1", "seed=7", "label=run-7"]
    config = load_train_config(path, assignments=assignments)
    assert config.grpo.learning_rate == 1e-5 and config.seed == 7 and config.label == "run-7"
    assert config.env.sizes[sizes[0]].hole_ratio == 0.1  # the size's key is an integer in the file
    assert config.env.sizes[sizes[1]] == default_config().sizes[sizes[1]]
    run = load_run_config(path, assignments=["benchmark={agents: [3], per_cell: 2}", "env=null"])
    assert run.benchmark.agents == [3] and run.benchmark.per_cell == 2 and run.env is None  # YAML values
    for bad, reason in (
        (["grpo.learing_rate=1e-5"], "grpo.learing_rate"),  # misspelt: the schema's unknown-field error
        (["grpo.learning_rate=fast"], "grpo.learning_rate"),
        (["grpo.learning_rate"], "expected KEY=VALUE"),
        (["=3"], "expected KEY=VALUE"),
        (["model.name=m2"], "model is not a section"),
        (["grpo.learning_rate=[1"], "not YAML data"),
    ):
        with pytest.raises(ConfigError, match=reason):
            load_train_config(path, assignments=bad)
    data = {"a": {"b": 1, "c": [1, 2]}, "d": "x"}
    assert set_values(data, ["a.b=2"]) == {"a": {"b": 2, "c": [1, 2]}, "d": "x"} and data["a"]["b"] == 1
    assert changed_settings(data, set_values(data, ["a.b=2", "a.e=5"])) == ["a.b: 1 -> 2", "a.e: None -> 5"]
    assert changed_settings(data, data) == []
    shipped = load_run_config(Path(__file__).resolve().parents[1] / "configs" / "grpo-lift.yaml")
    recorded = yaml.safe_load(yaml.safe_dump(json.loads(shipped.model_dump_json())))  # as run_config.yaml
    assert changed_settings(recorded, json.loads(shipped.model_dump_json())) == []  # a plain resume: no warning


def test_shipped_configs_load():
    from pathlib import Path

    from actors.settings import load_run_config

    configs = Path(__file__).resolve().parents[1] / "configs"
    assert load_train_config(configs / "train_tiny.yaml").grpo.group_size == 8
    demo = load_run_config(configs / "cpu-demo.yaml")
    assert demo.engineer.preset == "V6"
    assert demo.model == "models/base-v1" and not demo.warm_start  # the shipped base, no SFT
    assert (configs.parent / demo.model / "model.safetensors").exists()
    assert load_run_config(configs / "qwen3-4b.yaml").deepspeed.zero_stage == 3
    lora = load_run_config(configs / "qwen3-4b-lora.yaml")
    assert lora.grpo.lora.rank == 32 and lora.resources.learners == 1


def test_a_steps_record_adds_its_draws_times_and_takes_each_draws_slowest_worker():
    """Dynamic sampling's refills run after the step's own draw: their rollout times add to the step's parts
    instead of showing up as Ray overhead."""
    from actors.trainer import step_record
    from actors.trajectory import RolloutSummary

    def summary(worker: int, generate: float, samples: int = 8) -> RolloutSummary:
        return RolloutSummary(
            worker=worker, instances=1, replayed=0, skipped=0, samples=samples, prompt_tokens=100,
            response_tokens=50, reward_sum=2.0, valid=2, optimal=1, signal_groups=1, failures={"hole": 6},
            weight_versions=[3], digest={}, times={"sample": 0.5, "generate": generate, "score": 0.1},
        )  # fmt: skip

    draws = [[summary(0, 3.0), summary(1, 5.0)], [summary(0, 2.0)]]  # the step's draw, then one refill
    times = {"rollout": 8.0, "train": 10.0, "wait_next": 0.0, "sync": 1.0, "wall": 20.0}
    record = step_record(0, 1, 1, draws, {"skipped": False}, {"gather": 0.25, "load": 0.5}, times, 3)
    assert record["time"]["generate"] == 7.0 and record["time"]["sample"] == 1.0
    assert record["time"]["score"] == pytest.approx(0.2)
    assert record["time"]["ray_overhead"] == pytest.approx(20.0 - (1.0 + 7.0 + 0.2 + 10.0 + 0.75))
    assert record["samples"] == 24 and record["tokens_per_s"] == pytest.approx(150 / 7.0)
    assert record["valid_rate"] == pytest.approx(6 / 24) and record["failures"]["hole"] == pytest.approx(18 / 24)
