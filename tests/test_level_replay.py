"""Solver-scored level replay without Ray: regret from verdicts, the replay distribution, ACCEL mutants that
re-solve, the replay mix, and the ``plr-levels`` engineer's decision."""

import random

import numpy as np

from actors.engineer import EngineerConfig, decide
from actors.engineer_context import EngineerInputs
from actors.level_replay import Level, LevelReplayConfig, ReplaySet, choose_levels, replay_distribution
from actors.trajectory import TrajectoryBatch
from env.config import default_config
from env.evaluate import evaluate, regret
from env.generator import mutate
from env.stats import FailureTable
from tests.brute_force import min_makespan


def plan(moves_per_agent):
    return "<answer>\n" + "\n".join(f"Agent {i}: {', '.join(m)}" for i, m in enumerate(moves_per_agent)) + "\n</answer>"


def test_regret_is_zero_when_optimal_and_grows_as_the_plan_fails_earlier(small_instances):
    instance = next(i for i in small_instances if i.optimal_makespan >= 4)
    assert regret(evaluate(instance, plan(instance.solution)), instance.optimal_makespan) == 0.0
    assert regret(evaluate(instance, "no plan"), instance.optimal_makespan) == 1.0
    longer = [moves + ["WAIT", "WAIT"] if i == 0 else moves for i, moves in enumerate(instance.solution)]
    wait_then = [["WAIT"] * instance.optimal_makespan + moves for moves in instance.solution]  # valid, 2x slower
    valid_slow = evaluate(instance, plan(wait_then))
    assert valid_slow.valid and regret(valid_slow, instance.optimal_makespan) == 0.5
    assert regret(evaluate(instance, plan(longer)), instance.optimal_makespan) == 0.0  # waiting on the goal
    off_at_first = [["UP"] * (instance.size + 1)] + instance.solution[1:]
    late = evaluate(instance, plan([m[:-1] + ["UP"] * (instance.size + 1) for m in instance.solution]))
    early = evaluate(instance, plan(off_at_first))
    assert not late.valid and not early.valid and late.failure_step > early.failure_step
    assert regret(late, instance.optimal_makespan) < regret(early, instance.optimal_makespan) <= 1.0


def test_the_replay_distribution_prefers_high_scores_and_stale_levels():
    levels = [Level({"id": str(k)}, score, last_step=step) for k, (score, step) in enumerate(
        [(0.9, 10), (0.5, 10), (0.1, 10), (0.1, 0)])]  # fmt: skip
    p = replay_distribution(levels, step_now=10, temperature=0.3, staleness=0.3)
    assert np.isclose(p.sum(), 1.0) and p[0] > p[1] > p[2]
    assert p[3] > p[2]  # same score, never played since step 0: the staleness term lifts it
    ranks_only = replay_distribution(levels, 10, temperature=0.3, staleness=0.0)
    assert np.isclose(ranks_only[0] / ranks_only[1], 2 ** (1 / 0.3))


def test_mutants_differ_by_one_edit_and_are_re_solved(small_instances):
    rng = random.Random(0)
    for instance in small_instances[:20]:
        mutant = mutate(instance, rng, instance.id + "~m")
        assert mutant is not None and mutant.starts == instance.starts
        holes_changed = set(map(tuple, mutant.holes)) ^ set(map(tuple, instance.holes))
        goals_changed = [g for g, h in zip(mutant.goals, instance.goals) if g != h]
        assert len(holes_changed) + len(goals_changed) == 1  # one hole toggled or one goal moved
        if mutant.size <= 5:  # the optimum checked by brute force over joint states
            assert min_makespan(mutant.size, mutant.holes, mutant.starts, mutant.goals) == mutant.optimal_makespan
        assert evaluate(mutant, plan(mutant.solution)).optimal


def test_the_replay_mix_is_seeded_and_records_which_were_replayed(small_instances):
    replay = ReplaySet(small_instances[:3], probability=0.8)
    fresh = small_instances[10:60]
    mixed, replayed = replay.mix(fresh, seed=4)
    assert (mixed, replayed) == replay.mix(fresh, seed=4)
    assert 0.6 < np.mean(replayed) < 0.95
    assert all((m in small_instances[:3]) if r else (m is f) for m, r, f in zip(mixed, replayed, fresh))
    assert ReplaySet([], 0.8).mix(fresh, 4) == (fresh, [False] * len(fresh))


def test_batches_score_their_levels_by_mean_regret(small_instances):
    a, b = small_instances[:2]
    batch = TrajectoryBatch(instance_ids=[a.id, b.id], levels=[a.model_dump(), b.model_dump()],
                            group=[0, 0, 1, 1], regret=[0.0, 1.0, 0.5, 0.5])  # fmt: skip
    assert batch.level_scores() == {a.id: (a.model_dump(), 0.5), b.id: (b.model_dump(), 0.5)}


def test_the_plr_levels_engineer_keeps_the_config_and_proposes_levels_with_mutants(small_instances):
    levels = [Level(i.model_dump(), score=k / 40, last_step=k % 5) for k, i in enumerate(small_instances[:40])]
    inputs = EngineerInputs(round=0, config=default_config(), validation=FailureTable(), levels=levels, step=5)
    settings = EngineerConfig(backend="plr-levels", levels=LevelReplayConfig(levels_per_round=8))
    decision = decide(settings, inputs)
    assert decision.config == inputs.config and not decision.changes
    originals = [level for level in decision.levels if "~m" not in level.id]
    mutants = [level for level in decision.levels if "~m" in level.id]
    assert len(originals) == 8 and len(mutants) >= 6
    assert decide(settings, inputs).levels == decision.levels  # seeded
    assert len(choose_levels(levels, 5, LevelReplayConfig(capacity=4, levels_per_round=8), 0)) <= 8
    best = {level.id for level in originals}
    assert len(best & {i.id for i in small_instances[20:40]}) > len(best & {i.id for i in small_instances[:20]})
