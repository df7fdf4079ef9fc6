import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from env.evaluate import check_plan
from env.grid import Grid
from env.solver import BudgetExceeded, SolverLimits, Unsolvable, analyse, solve
from tests.brute_force import min_makespan, min_sum_of_costs


@st.composite
def tiny_instances(draw):
    size = draw(st.sampled_from([2, 3, 3, 4]))
    agents = draw(st.integers(2, 3 if size < 4 else 2))
    cells = [(r, c) for r in range(size) for c in range(size)]
    holes = draw(st.lists(st.sampled_from(cells), unique=True, max_size=size * size // 3))
    free = [c for c in cells if c not in holes]
    if len(free) < agents + 1:
        holes, free = [], cells
    starts = draw(st.lists(st.sampled_from(free), min_size=agents, max_size=agents, unique=True))
    goals = draw(st.lists(st.sampled_from(free), min_size=agents, max_size=agents, unique=True))
    return size, holes, starts, goals


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances())
def test_optima_match_brute_force(case):
    size, holes, starts, goals = case
    grid = Grid(size, holes)
    best_makespan = min_makespan(size, holes, starts, goals, horizon=16)
    best_soc = min_sum_of_costs(size, holes, starts, goals, horizon=16)
    best_soc_no_wait = min_sum_of_costs(size, holes, starts, goals, allow_wait=False, horizon=16)
    if any(grid.distance(s, g) >= 10**9 for s, g in zip(starts, goals)) or best_makespan is None:
        with pytest.raises((Unsolvable, BudgetExceeded)):
            analyse(size, holes, starts, goals, SolverLimits(max_expansions=50_000, max_nodes=2_000))
        return
    analysis = analyse(size, holes, starts, goals)
    assert analysis.optimal_makespan == best_makespan
    assert analysis.optimal_sum_of_costs == best_soc
    assert analysis.requires_wait == (best_soc_no_wait is None or best_soc_no_wait > best_soc)
    instance = analysis.to_instance("x", size, holes, starts, goals, seed=0)
    verdict = check_plan(instance, analysis.solution)
    assert verdict.valid and verdict.makespan == best_makespan


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances())
def test_cbs_and_joint_search_each_match_brute_force(case):
    """Both exact searches, run on their own, agree with the brute force on every objective."""
    size, holes, starts, goals = case
    best = {
        ("sum_of_costs", True): min_sum_of_costs(size, holes, starts, goals, horizon=16),
        ("sum_of_costs", False): min_sum_of_costs(size, holes, starts, goals, allow_wait=False, horizon=16),
        ("makespan", True): min_makespan(size, holes, starts, goals, horizon=16),
    }
    limits = SolverLimits(max_expansions=30_000, max_nodes=1_000)
    for method in ("cbs", "joint"):
        for (objective, allow_wait), expected in best.items():
            try:
                found = solve(
                    size, holes, starts, goals, objective, allow_wait=allow_wait, limits=limits, method=method
                )
            except Unsolvable:
                assert expected is None
                continue
            except BudgetExceeded:
                assert method == "cbs"  # CBS cannot prove unsolvability; it must not answer wrongly either
                continue
            value = found.makespan if objective == "makespan" else found.sum_of_costs
            assert value == expected, (method, objective, allow_wait)
            if not allow_wait:
                assert not found.has_wait


def test_swap_in_a_corridor_is_unsolvable():
    holes = [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    with pytest.raises(Unsolvable):
        solve(3, holes, [(0, 0), (0, 2)], [(0, 2), (0, 0)])


def test_swap_with_a_siding_needs_a_detour():
    # corridor along row 0 with a siding at (1, 1): one agent steps aside
    holes = [(1, 0), (1, 2), (2, 0), (2, 1), (2, 2)]
    solution = solve(3, holes, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert solution.sum_of_costs == min_sum_of_costs(3, holes, [(0, 0), (0, 2)], [(0, 2), (0, 0)])


def test_crossing_needs_a_wait():
    # two straight, crossing corridors meeting in the centre at the same time
    holes = [(0, 0), (0, 2), (2, 0), (2, 2)]
    analysis = analyse(3, holes, [(1, 0), (0, 1)], [(1, 2), (2, 1)])
    assert analysis.optimal_sum_of_costs == 5 and analysis.optimal_makespan == 3
    assert analysis.requires_wait


def test_makespan_objective_can_cost_more_in_total():
    # checked against brute force: both objectives are each optimal on their own
    size, holes = 4, [(1, 1), (2, 2)]
    starts, goals = [(0, 0), (3, 3), (0, 3)], [(3, 3), (0, 0), (3, 0)]
    by_makespan = solve(size, holes, starts, goals, "makespan")
    by_cost = solve(size, holes, starts, goals, "sum_of_costs")
    assert by_makespan.makespan == min_makespan(size, holes, starts, goals)
    assert by_cost.sum_of_costs == min_sum_of_costs(size, holes, starts, goals)
    assert by_makespan.makespan <= by_cost.makespan
    assert by_cost.sum_of_costs <= by_makespan.sum_of_costs


def test_budget_is_reported_not_guessed():
    holes = [(0, 0), (0, 2), (2, 0), (2, 2)]
    runs = [
        ("cbs", SolverLimits(max_nodes=0)),
        ("cbs", SolverLimits(max_expansions=0)),
        ("joint", SolverLimits(max_expansions=0)),
    ]
    for method, limits in runs:
        with pytest.raises(BudgetExceeded):
            solve(3, holes, [(1, 0), (0, 1)], [(1, 2), (2, 1)], limits=limits, method=method)


def test_bad_instances_get_clear_errors():
    with pytest.raises(Unsolvable, match="hole"):
        solve(3, [(0, 0)], [(0, 0), (1, 1)], [(2, 2), (2, 1)])
    with pytest.raises(Unsolvable, match="share a start"):
        solve(3, [], [(0, 0), (0, 0)], [(2, 2), (2, 1)])
    with pytest.raises(Unsolvable, match="cannot reach"):
        solve(3, [(0, 1), (1, 0)], [(0, 0), (2, 2)], [(2, 2), (1, 1)])
