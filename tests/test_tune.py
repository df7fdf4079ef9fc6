"""Sweeps: the pure parts (merging, resources, concurrency, loading) and a real 2-trial Ray Tune sweep of
the main job on the tiny warm-started policy, resumed without rerunning its finished trials."""

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from actors.metrics import read_metrics
from env.config import ConfigError
from tests.cluster import BIN
from tests.test_job import job_config
from tune.costs import per_token_costs, step_rows
from tune.summary import main as summary_main
from tune.summary import write_summary
from tune.sweep import concurrency, load_sweep, merge, trial_bundles, trial_name, trial_resources


def write_sweep(folder, base: dict, **sweep) -> str:
    (folder / "base.yaml").write_text(yaml.safe_dump(base))
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml"} | sweep))
    return str(path)


def test_per_token_costs_sum_the_steps_of_every_run_under_a_folder(tmp_path):
    def step(tokens, trained, generate, train):
        times = {"generate": generate, "train": train, "sync": 0.5, "wall": generate + train + 0.5}
        return {"samples": 4, "response_tokens": tokens, "train": {"train_tokens": trained}, "time": times}

    for run, rows in {
        "a": [step(100, 50, 1.0, 0.5)],
        "b": [step(300, 0, 3.0, 0.0) | {"train": {"skipped": True}}],
    }.items():
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    costs = per_token_costs(step_rows(tmp_path))
    assert costs["steps"] == 2 and costs["generated_tokens_per_sample"] == 50
    assert costs["generate_ms_per_token"] == 10.0 and costs["train_ms_per_token"] == 10.0
    assert costs["step_s"] == 2.75 and costs["generate_share_of_step"] == 4.0 / 5.5


def test_merge_is_nested_and_leaves_its_inputs_alone():
    base = {"grpo": {"group_size": 8, "max_tokens": 64}, "rounds": 3}
    merged = merge(base, {"grpo": {"group_size": 4}, "rounds": 1})
    assert merged == {"grpo": {"group_size": 4, "max_tokens": 64}, "rounds": 1}
    assert base["grpo"]["group_size"] == 8


def test_trials_get_their_variant_seed_label_and_placement_group(tmp_path):
    path = write_sweep(
        tmp_path,
        job_config("tiny"),
        overrides={"resources": {"learners": 2, "rollout_workers": 3}},
        variants={
            "base-V1": {"engineer": {"backend": "base", "preset": "V1"}},
            "plr": {"engineer": {"backend": "plr"}},
        },
        seeds=[0, 7],
    )
    sweep = load_sweep(path)
    assert sorted(sweep.configs) == [("base-V1", 0), ("base-V1", 7), ("plr", 0), ("plr", 7)]
    config = sweep.configs["plr", 7]
    assert (config.engineer.backend, config.seed, config.env.seed, config.label) == ("plr", 7, 7, "plr-s7")
    assert sweep.configs["base-V1", 0].engineer.preset == "V1"
    assert trial_bundles(config) == [{}, {"CPU": 1.0}, {"CPU": 1.0}] + [{"CPU": 0.25}] * 3
    assert trial_resources(config) == {"CPU": 1.0 + 2.0 + 0.75}  # one Serve replica + learners + workers
    assert trial_resources(sweep.configs["base-V1", 0]) == {"CPU": 2.0 + 2.0 + 0.75}  # + the frozen base
    assert sweep.trial_config("plr", 0, model="/m").model == "/m"
    # the command line's --set: one seed of the sweep, one knob changed for every trial
    narrowed = load_sweep(path, ["seeds=[7]", "overrides.grpo.learning_rate=1e-5"])
    assert sorted(narrowed.configs) == [("base-V1", 7), ("plr", 7)]
    assert {c.grpo.learning_rate for c in narrowed.configs.values()} == {1e-5}
    with pytest.raises(ConfigError, match="seedz"):
        load_sweep(path, ["seedz=[7]"])


def test_concurrency_follows_the_cluster_and_its_largest_trial():
    needs = [{"CPU": 2.5}, {"CPU": 4.0, "GPU": 2.0}]
    assert concurrency({"CPU": 16, "GPU": 8}, needs) == 4
    assert concurrency({"CPU": 16, "GPU": 2}, needs) == 1
    assert concurrency({"CPU": 2}, needs) == 1  # never 0: one trial at a time on a small machine


@pytest.mark.parametrize(
    "variants, message",
    [
        ({"x": {"engineer": {"backend": "oracle"}}}, "variant 'x'"),
        ({"x": {"grpo": {"bogus": 1}}}, "bogus"),
        ({}, "variants"),
    ],
)
def test_bad_sweeps_are_clear_errors(tmp_path, variants, message):
    path = write_sweep(tmp_path, job_config("tiny"), variants=variants)
    with pytest.raises(ConfigError, match=message):
        load_sweep(path)


def test_two_trial_sweep_writes_the_summary_and_resumes_without_rerunning(warm_model, ray_cluster, tmp_path):
    model, _ = warm_model
    base = merge(job_config(model), {"rounds": 2, "grpo": {"steps_per_round": 1}, "checkpoint": {"every_steps": 0}})
    variants = {"fixed": {"engineer": {"backend": "fixed"}}, "heuristic": {"engineer": {"backend": "heuristic"}}}
    path = write_sweep(tmp_path, base, variants=variants, seeds=[3], shared_warm_start=False)
    out = tmp_path / "sweep"
    write_benchmark(out / "shared" / "start", 0.2)  # a start scored before (as docs/results' sweeps copy one in):
    (out / "shared" / "start" / "validation.json").write_text(  # kept, not scored again (actors.job.score_start)
        json.dumps({"summary": {"valid_rate": 0.25, "optimal_rate": 0.125}})
    )
    command = [str(BIN / "envengineer"), "tune", path, "--out", str(out)]
    environment = os.environ | {"RAY_ADDRESS": ray_cluster}
    first = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=1200)
    assert first.returncode == 0, first.stderr[-4000:]

    rows = list(csv.DictReader((out / "summary.csv").open()))
    trials = [(r["variant"], r["seed"], r["status"]) for r in rows]
    assert trials == [("before RL", "-", "done"), ("fixed", "3", "done"), ("heuristic", "3", "done")]
    assert float(rows[0]["valid_r-1"]) == 0.25 and float(rows[0]["acc_sum_3"]) == 0.2
    for row in rows[1:]:  # every trial starts from the model scored before RL (its round -1)
        assert row["valid_r-1"] == rows[0]["valid_r-1"]
        assert 0.0 <= float(row["acc_sum_3"]) <= 1.0 and 0.0 <= float(row["valid_r0"]) <= 1.0
        assert row["code"] and row["precision"] == "fp32"  # each trial's provenance.jsonl and learner.jsonl
    summary = (out / "summary.md").read_text()
    print(summary)  # shown with -s: the sweep's table
    assert "| fixed | 3 | done |" in summary and "| heuristic | 3 | done |" in summary and "3 agents" in summary
    assert (out / "summary.png").stat().st_size > 0
    assert list((out / "tune").glob("experiment_state-*.json")), "Tune's experiment state"
    assert len(list((out / "tune").glob("*/result.json"))) == 2, "one Tune result file per trial"
    for trial in ("fixed-s3", "heuristic-s3"):
        assert (out / "runs" / trial / "final" / "benchmark.json").exists()
        assert yaml.safe_load((out / "runs" / trial / "run_config.yaml").read_text())["label"] == trial
    metrics = {t: read_metrics(out / "runs" / t / "metrics.jsonl") for t in ("fixed-s3", "heuristic-s3")}
    assert all(len(m) == 2 for m in metrics.values())

    refused = subprocess.run(command, env=environment, capture_output=True, text=True)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    again = subprocess.run([*command, "--resume"], env=environment, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert {t: read_metrics(out / "runs" / t / "metrics.jsonl") for t in metrics} == metrics  # nothing rerun
    assert "| fixed | 3 | done |" in again.stdout


def fake_trial(run_dir, sizes: dict[int, float], valid: list[float], acc: float) -> None:
    """A finished trial's files as the main job writes them (configs, validation, benchmark)."""
    for k, rate in enumerate(valid):
        folder = run_dir / f"round_{k}"
        folder.mkdir(parents=True)
        config = {"sizes": {s: {"data_ratio": r, "hole_ratio": 0.1, "wait_ratio": 0.2} for s, r in sizes.items()}}
        (folder / "env_config.yaml").write_text(yaml.safe_dump(config))
        (folder / "validation.json").write_text(json.dumps({"summary": {"valid_rate": rate, "optimal_rate": rate / 2}}))
    write_benchmark(run_dir, acc)


def write_benchmark(run_dir, acc: float) -> None:
    """``final/benchmark.json`` with the 3-agent acc. ``acc`` (a fraction) on every size."""
    pct = 100 * acc  # benchmark.json holds percentages (env.benchmark.ScoreTable.to_dict)
    cells = {str(s): {"acc": pct, "opt": pct / 2, "n": 2} for s in range(3, 11)}
    table = {"3": {"sizes": cells, "sum": {"acc": pct, "opt": pct / 2}}}
    (run_dir / "final").mkdir(parents=True)
    (run_dir / "final" / "benchmark.json").write_text(json.dumps({"table": table}))


def test_the_summary_gives_the_paper_table_per_variant_with_the_spread_over_seeds(tmp_path):
    variants = {"fixed": {"engineer": {"backend": "fixed"}}, "plr": {"engineer": {"backend": "plr"}}}
    sweep = load_sweep(write_sweep(tmp_path, job_config("tiny"), variants=variants, seeds=[0, 1]))
    for variant, accs in (("fixed", (0.1, 0.3)), ("plr", (0.5, 0.5))):
        for seed, acc in enumerate(accs):
            fake_trial(tmp_path / "runs" / trial_name(variant, seed), {3: 0.5, 4: 0.5}, [0.1, 0.2], acc)
    for seed, reverted in ((0, False), (1, True)):  # revert_below_start's records: fixed-s1 undid round 0
        guard = tmp_path / "runs" / trial_name("fixed", seed) / "round_0" / "guard.json"
        guard.write_text(json.dumps({"round": 0, "valid_rate": 0.1, "floor": 0.06, "reverted": reverted}))
    probes = [{"flagged": {"9": "all fail"}}, {"flagged": {}}]  # the proposal's probe, then the revision's
    notes = ["probe: revised by the engineer", "evidence: validation valid: 3x3 50%"]  # neither is the projection
    decision = {"changes": ["sizes.3.data_ratio: 0.5 -> 0.75"], "fallback": None, "notes": notes, "probes": probes}
    sizes = {
        "3": {"data_ratio": 0.75, "hole_ratio": 0.2, "wait_ratio": 0.4},
        "9": {"data_ratio": 0.25, "hole_ratio": 0.6, "wait_ratio": 0.0},
    }
    (tmp_path / "runs" / "plr-s0" / "round_0" / "engineer").mkdir()
    (tmp_path / "runs" / "plr-s0" / "round_0" / "engineer" / "decision.json").write_text(
        json.dumps(decision | {"config": {"sizes": sizes}})
    )
    steps = [{"round": k, "valid_rate": v} for k, v in ((0, 0.1), (0, 0.3), (1, 0.5))]  # the rollouts' rates
    steps[0]["train"] = {"signal_share": 0.25}
    (tmp_path / "runs" / "plr-s0" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    starts = [{"from_step": 0, "precision": "fp32"}, {"from_step": 4, "precision": "bf16"}]  # resumed elsewhere
    (tmp_path / "runs" / "plr-s0" / "learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in starts))
    codes = [{"commit": "0123456789ab", "dirty": False}, {"commit": "fedcba987654", "dirty": True}]
    provenance = "".join(json.dumps({"from_step": s["from_step"], "code": c}) + "\n" for s, c in zip(starts, codes))
    (tmp_path / "runs" / "plr-s0" / "provenance.jsonl").write_text(provenance)
    start = tmp_path / "shared" / "start"  # the starting policy, scored once by the sweep
    fake_trial(start, {3: 1.0}, [], 0.04)
    (start / "validation.json").write_text(json.dumps({"summary": {"valid_rate": 0.06, "optimal_rate": 0.02}}))
    text = write_summary(tmp_path, sweep).read_text()
    assert "**fixed** (2 seeds; acc./opt. in %)" in text and "**before RL** (1 model; acc./opt. in %)" in text
    assert "| before RL | - | done | 4.0/2.0 | 6.0/2.0 | - | - |" in text
    assert "| fixed | 0 | done | 10.0/5.0 | 6.0/2.0 | 10.0/5.0 | 20.0/10.0 | - |" in text  # trials start there
    assert "| rounds undone (below the start) |" in text and "| fixed | 1 | done | 30.0/15.0 |" in text
    assert "| 10.0/5.0 | 20.0/10.0 | r0 |" in text
    plr = "| plr | 0 | done | 50.0/25.0 | 6.0/2.0 | 10.0/5.0 | 20.0/10.0 | - | fp32/bf16 | 01234567/fedcba98* |"
    assert plr in text  # no guard: "-"; resumed on other hardware and other (uncommitted) code
    assert "| rounds undone (below the start) | precision | code |" in text and "| r0 | - | - |" in text  # no records
    assert "| 3 | 20.0/10.0 |" in text and "| 20.0±14.1/10.0±7.1 |" in text  # mean over seeds; Sum with std
    assert "| 50.0/25.0 |" in text and "| 50.0±0.0/25.0±0.0 |" in text
    assert (tmp_path / "summary_configs.png").stat().st_size > 0
    assert "| fixed | 2/2 |" in text
    assert "| plr | 1 | 1 | 0 | 0 | 0.75 | 0.30 | 0.30 | 2.0 | 1 of 1 / 1 / 1 |" in text  # the engineer's decisions
    assert "| fixed | 0 | 3x3:50% 4x4:50%, holes 0.10, WAIT 0.20 | 3x3:50% 4x4:50%, holes 0.10, WAIT 0.20 |" in text
    assert "| groups with signal r0 |" in text and "| 25.0 |" in text
    assert "rollouts r0 valid | rollouts r1 valid |" in text and "| 20.0 | 50.0 |" in text  # plr-s0's only
    summary_main([str(tmp_path / "sweep.yaml"), str(tmp_path), "--variants", "plr", "--name", "part"])
    part = (tmp_path / "part.md").read_text()
    assert "| plr | 2/2 |" in part and "| fixed |" not in part and "| before RL |" in part
    assert (tmp_path / "part.png").exists() and (tmp_path / "part_configs.png").exists()


def fake_record(run_dir, name: str, solved: list[str]) -> None:
    """A rescore record (tune.rescore) of a policy that solves exactly ``solved`` of four 3-agent instances."""
    ids = [f"bench/a3/s05/wr0.50/{k:03d}" for k in range(4)]
    rate = 100.0 * len(solved) / len(ids)
    table = {"3": {"sizes": {"5": {"acc": rate, "opt": rate, "n": 4}}, "sum": {"acc": rate, "opt": rate}}}
    record = {"suite": "benchmark", "per_cell": None, "max_tokens": 320, "instances": 4, "model": "m", "table": table}
    (run_dir / "rescore").mkdir(parents=True)
    (run_dir / "rescore" / f"{name}.json").write_text(json.dumps(record | {"valid": solved, "optimal": solved}))


def test_the_rescore_summary_pairs_each_trial_with_the_start(tmp_path):
    from tune.rescore import main as rescore_main

    sweep_file = write_sweep(tmp_path, job_config("tiny"), variants={"kl": {}}, seeds=[0, 1])
    ids = [f"bench/a3/s05/wr0.50/{k:03d}" for k in range(4)]
    fake_record(tmp_path / "shared" / "start", "full", ids[:2])
    fake_record(tmp_path / "runs" / "kl-s0", "full", ids[1:4])  # gains 2, loses 1
    fake_record(tmp_path / "runs" / "kl-s1", "full", ids[:2])  # the same instances as the start
    rescore_main([sweep_file, str(tmp_path), "--name", "full", "--summary-only"])  # no engine: records only
    text = (tmp_path / "full.md").read_text()
    assert "Greedy, the full benchmark (4 instances, completions <= 320 tokens)" in text
    assert "| before RL | - | 50.0/50.0 | - |" in text
    assert "| kl | 0 | 75.0/75.0 | 2/1 (p 1) |" in text and "| kl | 1 | 50.0/50.0 | 0/0 (p 1) |" in text
    assert "| kl | 2 | 62.5±17.7 | 62.5±17.7 | +12.5±17.7 |" in text  # the change is per seed, then averaged
    # instance k was drawn with holes 0, 0.1, 0.2, 0.3: kl-s0 lost the first, gained the last two
    assert (
        "| variant | seed | 3 agents, holes 0 / 0.1 / 0.2 / 0.3 |" in text
        and "| before RL | - | 1 / 1 / 0 / 0 |" in text
    )
    assert "| kl | 0 | -1 / +0 / +1 / +1 |" in text and "| kl | mean of 2 | -0.5 / +0.0 / +0.5 / +0.5 |" in text


def test_the_rescore_summary_pairs_trials_with_a_named_variant(tmp_path):
    from tune.rescore import main as rescore_main

    sweep_file = write_sweep(tmp_path, job_config("tiny"), variants={"g8": {}, "g4": {}}, seeds=[0, 1])
    ids = [f"bench/a3/s05/wr0.50/{k:03d}" for k in range(4)]
    fake_record(tmp_path / "runs" / "g8-s0", "full", ids[:2])
    fake_record(tmp_path / "runs" / "g4-s0", "full", ids[1:4])  # against g8-s0: gains 2, loses 1
    fake_record(tmp_path / "runs" / "g4-s1", "full", ids)  # g8-s1 has no record: no pair
    rescore_main([sweep_file, str(tmp_path), "--name", "full", "--summary-only", "--against", "g8"])
    text = (tmp_path / "full.md").read_text()
    assert "| variant | seed | 3 agents gained/lost vs g8 |" in text
    assert "| g4 | 0 | 2/1 (p 1) |" in text and "| g4 | 1 |" not in text.split("vs g8 |")[1]


def test_extend_sweep_copies_finished_trials_without_their_benchmark(tmp_path):
    from scripts.extend_sweep import extend

    short, long = tmp_path / "short", tmp_path / "long"
    for seed in (0, 1):
        fake_trial(short / "runs" / trial_name("a", seed), {3: 1.0}, [0.1, 0.2], 0.3)
        checkpoint = short / "runs" / trial_name("a", seed) / "checkpoints" / "step-000004"
        checkpoint.mkdir(parents=True)
        (checkpoint / "state.json").write_text("{}")
    fake_trial(short / "shared" / "start", {3: 1.0}, [], 0.04)
    fake_record(short / "runs" / "a-s0", "full", [])  # tune.rescore's record of the shorter run's policy
    copies = extend(short, long, "a", "b", [0, 1])
    assert [p.name for p in copies] == ["b-s0", "b-s1"]
    for copy in copies:  # the rounds and the checkpoint to resume from stay; the benchmark is taken again
        assert (copy / "checkpoints" / "step-000004" / "state.json").exists()
        assert (copy / "round_1" / "validation.json").exists() and not (copy / "final").exists()
        assert not (copy / "rescore").exists()
    assert (long / "shared" / "start" / "final" / "benchmark.json").exists()  # the start, scored once
    with pytest.raises(SystemExit, match="exists"):
        extend(short, long, "a", "b", [0])
    (short / "runs" / "a-s0" / "final" / "benchmark.json").unlink()
    with pytest.raises(SystemExit, match="has not finished"):
        extend(short, tmp_path / "other", "a", "b", [0])


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    from actors.pretrain import PretrainConfig
    from actors.settings import load_run_config

    data = yaml.safe_load(path.read_text())
    if "variants" in data:
        assert load_sweep(path).configs
    elif "preset" in data:  # a pretraining recipe
        PretrainConfig.load(path)
    else:
        load_run_config(path)


def test_the_one_run_lift_recipe_is_the_guard_12_rows_seed_0():
    """configs/grpo-lift.yaml (README, docs/results.md) trains as the measured guard-12 trial of seed 0 does."""
    from actors.settings import load_run_config

    configs = Path(__file__).parents[1] / "configs"
    recipe = load_run_config(configs / "grpo-lift.yaml").model_dump()
    trial = load_sweep(configs / "sweep-grpo-guard-12.yaml").trial_config("kl-0.1-guard-12-rounds", 0).model_dump()
    for config in (recipe, trial):
        config.pop("label"), config.pop("score_start")  # the sweep scores its start once for every trial
        config["engineer"].pop("max_tokens")  # `fixed` writes nothing
    assert recipe == trial
