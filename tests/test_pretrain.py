"""Pretraining: resumable to the same curve, data disjoint from the suites, length-grouped batches."""

import json

import pytest

from actors.demonstrations import layout, length_grouped_batches, suite_layouts
from actors.pretrain import Batches, CorpusConfig, OptimConfig, PretrainConfig, build_corpus, corpus_specs, pretrain
from env.generator import make_instances


def tiny_config(**optim) -> PretrainConfig:
    return PretrainConfig(
        preset="tiny",
        corpus=CorpusConfig(instances=160, held_out=4, agents={2: 1.0, 3: 1.0}, sizes={3: 1, 4: 1, 5: 1}),
        optim=OptimConfig(steps=8, batch_tokens=2048, warmup_steps=2, compile=False, **optim),
        log_every=1,
        eval_every=8,
        checkpoint_every=2,
        max_new_tokens=32,
    )


def losses(folder) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows]


@pytest.mark.slow
def test_interrupted_and_resumed_pretraining_gives_the_same_loss_curve(tmp_path):
    config = tiny_config()
    whole = tmp_path / "whole"
    result = pretrain(config, whole)
    assert result["step"] == 8 and (whole / "model" / "model.safetensors").exists()
    assert (whole / "curves.png").exists()

    parted = tmp_path / "parted"
    assert pretrain(config, parted, stop_after=3) == {"step": 3, "stopped": True}  # killed after step 3
    with pytest.raises(FileExistsError):
        pretrain(config, parted)  # not without --resume
    pretrain(config, parted, resume=True)  # from the step-2 checkpoint; step 3's record is redone once
    assert [s for s, _ in losses(parted)] == list(range(1, 9))
    assert losses(parted) == losses(whole)
    first, last = losses(whole)[0][1], losses(whole)[-1][1]
    assert last < first  # it learns
    held = [json.loads(line) for line in (whole / "heldout.jsonl").read_text().splitlines()]
    assert [h["step"] for h in held] == [8] and 0.0 <= held[0]["valid"] <= 1.0


def test_resume_refuses_a_changed_config(tmp_path):
    config = tiny_config()
    pretrain(config, tmp_path / "run", stop_after=1)
    changed = tiny_config(learning_rate=1e-2)
    with pytest.raises(ValueError, match="differs"):
        pretrain(changed, tmp_path / "run", resume=True)


@pytest.mark.slow
def test_corpus_shares_no_layout_with_the_suites_or_the_held_out_slice(tmp_path):
    """On 3x3 maps with 2 agents the random draws do hit validation layouts; none reaches the corpus."""
    config = PretrainConfig(
        corpus=CorpusConfig(instances=1500, held_out=200, agents={2: 1.0}, sizes={3: 1.0}, hole_levels=[0.0]),
    )
    suites = suite_layouts()
    raw = [r.instance for r in make_instances(corpus_specs(config, "pretrain", 1500))]
    assert any(layout(i) in suites for i in raw if i is not None)  # the filter has work to do
    train, held = build_corpus(config, tmp_path)
    assert train and held
    train_layouts = {layout(i) for i in train}
    assert not train_layouts & suites
    assert not {layout(i) for i in held} & suites
    assert not train_layouts & {layout(i) for i in held}
    again, _ = build_corpus(config, tmp_path / "again")  # deterministic
    assert [i.to_json() for i in again] == [i.to_json() for i in train]


def test_shipped_recipe_corpus_avoids_the_suites():
    """The first draws of the shipped base's recipe (configs/pretrain-base-v1.yaml) avoid every suite layout."""
    from pathlib import Path

    config_dir = Path(__file__).parents[1] / "configs"
    config = PretrainConfig.load(config_dir / "pretrain-base-v1.yaml")
    assert config == PretrainConfig()  # the defaults are the shipped recipe
    assert PretrainConfig.load(config_dir / "pretrain-tiny-test.yaml").preset == "tiny"
    specs = corpus_specs(config, "pretrain", 300)
    assert {s.num_agents for s in specs} == {2, 3, 4, 5} and {s.size for s in specs} == set(range(3, 11))


def test_length_grouped_batches_cover_every_example_once_within_the_budget():
    lengths = [(7 * i) % 90 + 10 for i in range(500)]
    batches = length_grouped_batches(lengths, 400, seed=3)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 400 for b in batches)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert sum(lengths) / padded > 0.85  # little padding
    assert batches == length_grouped_batches(lengths, 400, seed=3)
    steps = Batches(lengths, 400, seed=3)
    assert steps[steps.per_epoch] != steps[0]  # each epoch its own order
    assert steps[5] == Batches(lengths, 400, seed=3)[5]
