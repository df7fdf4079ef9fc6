import pytest

from env.evaluate import FAILURE_CATEGORIES, RewardConfig, check_plan, evaluate, evaluate_batch
from env.instance import Instance
from env.prompt import format_answer, parse_response, render_prompt

# 3x3, hole in the centre; agent 0 goes along the top, agent 1 along the left column.
INSTANCE = Instance(
    id="case",
    size=3,
    holes=[(1, 1)],
    starts=[(0, 0), (2, 0)],
    goals=[(0, 2), (0, 0)],
    optimal_makespan=2,
    optimal_sum_of_costs=4,
    requires_wait=False,
    seed=0,
    solution=[["RIGHT", "RIGHT"], ["UP", "UP"]],
)


def answer(*lines):
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"


CASES = {
    "parse_error": "the agents should go right",
    "wrong_agents": answer("Agent 0: RIGHT, RIGHT"),
    "off_grid": answer("Agent 0: UP", "Agent 1: UP, UP"),
    "hole": answer("Agent 0: RIGHT, DOWN", "Agent 1: UP, UP"),
    "vertex_conflict": answer("Agent 0: WAIT, WAIT, RIGHT, RIGHT", "Agent 1: UP, UP"),
    "edge_conflict": answer("Agent 0: WAIT, DOWN", "Agent 1: UP, UP"),
    "goal_not_reached": answer("Agent 0: RIGHT", "Agent 1: UP, UP"),
}


@pytest.mark.parametrize("category", FAILURE_CATEGORIES)
def test_every_failure_category_is_caught(category):
    verdict = evaluate(INSTANCE, CASES[category])
    assert not verdict.valid and verdict.failure == category
    assert verdict.reward == 0.0


def test_failure_reports_agent_and_step():
    verdict = evaluate(INSTANCE, CASES["vertex_conflict"])
    assert (verdict.failure_agent, verdict.failure_step) == (0, 2)
    edge = evaluate(INSTANCE, CASES["edge_conflict"])
    assert edge.failure_step == 2 and "swap" in edge.detail
    hole = evaluate(INSTANCE, CASES["hole"])
    assert (hole.failure_agent, hole.failure_step) == (0, 2)


def test_first_failure_in_time_order_then_fixed_order():
    # at t=1 agent 0 leaves the map and agent 1 walks into the hole: off_grid comes first
    plan = [["UP"], ["UP", "RIGHT"]]
    assert check_plan(INSTANCE, plan).failure == "off_grid"
    plan = [["RIGHT", "DOWN"], ["UP", "UP", "LEFT"]]  # hole at t=2 before off_grid at t=3
    assert check_plan(INSTANCE, plan).failure == "hole"


def test_valid_optimal_and_rewards():
    best = evaluate(INSTANCE, format_answer(INSTANCE.solution))
    assert best.valid and best.optimal and best.soc_optimal and best.reward == 1.5
    assert (best.makespan, best.sum_of_costs) == (2, 4)
    # a valid detour: agent 1 waits first, makespan 3 (not optimal)
    slow = evaluate(INSTANCE, answer("Agent 0: RIGHT, RIGHT", "Agent 1: WAIT, UP, UP"))
    assert slow.valid and not slow.optimal and slow.makespan == 3 and slow.reward == 1.0
    custom = RewardConfig(valid=2, optimal_bonus=0, invalid=-1, failure={"parse_error": -2})
    assert evaluate(INSTANCE, CASES["parse_error"], custom).reward == -2
    assert evaluate(INSTANCE, CASES["hole"], custom).reward == -1
    assert evaluate(INSTANCE, format_answer(INSTANCE.solution), custom).reward == 2


def test_progress_is_the_share_of_the_distance_covered_before_the_fault():
    # each agent has 2 steps to go; the hole case moves both one step, then agent 0 falls in
    assert evaluate(INSTANCE, CASES["hole"]).progress == 0.5
    assert evaluate(INSTANCE, answer("Agent 0: WAIT", "Agent 1: WAIT")).progress == 0.0  # standing still
    assert evaluate(INSTANCE, answer("Agent 0: RIGHT, RIGHT", "Agent 1: UP")).progress == 0.75  # goal not reached
    assert evaluate(INSTANCE, answer("Agent 0: DOWN", "Agent 1: RIGHT")).progress == 0.0  # walking away
    assert evaluate(INSTANCE, CASES["parse_error"]).progress == 0.0
    assert evaluate(INSTANCE, format_answer(INSTANCE.solution)).progress == 1.0
    graded = RewardConfig(progress=0.25)
    assert evaluate(INSTANCE, CASES["hole"], graded).reward == 0.125
    assert evaluate(INSTANCE, CASES["hole"]).reward == 0.0  # off by default
    assert evaluate(INSTANCE, format_answer(INSTANCE.solution), graded).reward == 1.5  # valid plans unchanged


def test_waiting_on_goal_blocks_it_and_leaving_it_is_allowed():
    # agent 0 reaches its goal at t=2, leaves at t=3 and comes back at t=4: valid, cost 4
    verdict = evaluate(INSTANCE, answer("Agent 0: RIGHT, RIGHT, DOWN, UP", "Agent 1: UP, UP"))
    assert verdict.valid and verdict.makespan == 4 and verdict.sum_of_costs == 6
    # trailing WAITs on the goal do not count
    verdict = evaluate(INSTANCE, answer("Agent 0: RIGHT, RIGHT, WAIT, WAIT", "Agent 1: UP, UP"))
    assert verdict.valid and verdict.optimal and verdict.makespan == 2


def test_parser_tolerates_think_case_and_spacing():
    text = (
        "<think>Agent 0 should go right. <answer>not this</answer></think>\nSo:\n"
        "<ANSWER>\n  agent 1 :  up,Up\n\nAGENT 0:right ,  RIGHT  \n</Answer>"
    )
    assert parse_response(text, 2) == [["RIGHT", "RIGHT"], ["UP", "UP"]]
    assert parse_response(answer("Agent 0:", "Agent 1: UP, UP"), 2) == [[], ["UP", "UP"]]


@pytest.mark.parametrize(
    "text",
    [
        answer("Agent 0: RIGHT, RIGHT,", "Agent 1: UP, UP"),
        answer("Agent 0: RIGHT RIGHT", "Agent 1: UP, UP"),
        answer("Agent 0: NORTH", "Agent 1: UP"),
        answer("Agent 0: RIGHT", "Agent 0: RIGHT", "Agent 1: UP"),
        answer("Agent 0: RIGHT", "Agent 1: UP", "then stop"),
        answer("Agent 0: RIGHT", "Agent 1: UP") + answer("Agent 0: RIGHT", "Agent 1: UP"),
        "<think>never closed " + answer("Agent 0: RIGHT", "Agent 1: UP"),
    ],
)
def test_parser_is_strict_about_content(text):
    assert parse_response(text, 2).category == "parse_error"


def test_prompt_contains_everything_needed():
    prompt = render_prompt(INSTANCE)
    assert "3x3" in prompt and "H" in prompt
    assert "Agent 0: start (0, 0), goal (0, 2)" in prompt
    assert "<answer>" in prompt and "WAIT" in prompt


def test_round_trip_for_generated_instances(small_instances):
    """solver plan -> text -> parse -> evaluate is valid and optimal for every generated instance."""
    for instance in small_instances:
        verdict = evaluate(instance, format_answer(instance.solution, thinking="plan ahead"))
        assert verdict.valid and verdict.optimal, (instance.id, verdict)
        assert verdict.makespan == instance.optimal_makespan
        assert verdict.sum_of_costs >= instance.optimal_sum_of_costs
        independent = sum(instance.grid.distance(tuple(s), tuple(g)) for s, g in zip(instance.starts, instance.goals))
        if instance.requires_wait:  # a needed WAIT means conflicts push the cost above the independent bound
            assert instance.optimal_sum_of_costs > independent


def test_batch_evaluation():
    pairs = [("case", CASES[c]) for c in FAILURE_CATEGORIES] + [("case", format_answer(INSTANCE.solution))]
    verdicts = evaluate_batch({"case": INSTANCE}, pairs)
    assert [v.failure for v in verdicts] == [*FAILURE_CATEGORIES, None]
    with pytest.raises(KeyError):
        evaluate_batch({"case": INSTANCE}, [("other", "")])
