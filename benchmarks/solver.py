"""Our exact solver against pymapf's CBS (PyPI ``pymapf``) on the same random instances.

Both solve for the minimum sum of costs under the same rules (vertex and swap conflicts, agents rest on
their goals, cost = final arrival). Prints, per (agents, size) cell, how many instances each solved, that
the optima agree on every instance both solved, and the median time ratio pymapf / ours, measured side by
side in this run. Also times our full ``analyse`` (makespan, sum of costs and the WAIT check).

    python benchmarks/solver.py                      # sizes 5..10, 2..5 agents, holes 0.1..0.4
    python benchmarks/solver.py --per-cell 20 --sizes 10 --agents 5   # the 5-agent 10x10 target
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from env.config import free_cells  # noqa: E402
from env.generator import InstanceSpec, _draw  # noqa: E402
from env.solver import SolverError, SolverLimits, analyse, solve  # noqa: E402

HOLE_RATIOS = (0.1, 0.2, 0.3, 0.4)


def pymapf_soc(size, holes, starts, goals, time_limit):
    import pymapf

    occupancy = [[(r, c) in set(holes) for c in range(size)] for r in range(size)]
    agents = [pymapf.Agent(f"a{i}", tuple(s), tuple(g)) for i, (s, g) in enumerate(zip(starts, goals))]
    problem = pymapf.MAPFProblem(pymapf.GridMap(occupancy), agents, allow_diagonals=False)
    solution = pymapf.ConflictBasedSearch(max_expansions=10**9, time_limit=time_limit).solve(problem)
    return None if solution is None else solution.sum_of_costs


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    try:
        value = fn(*args, **kwargs)
    except SolverError:
        value = None
    return value, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(range(5, 11)))
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 3, 4, 5])
    parser.add_argument("--per-cell", type=int, default=4, help="instances per (agents, size), holes cycling 0.1..0.4")
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds per instance for each solver")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    limits = SolverLimits(time_limit_s=args.time_limit, max_expansions=10**8, max_nodes=10**7)

    print(
        f"{'agents':>6} {'size':>4} {'n':>3} {'ours':>5} {'pymapf':>6} {'agree':>5} "
        f"{'ours ms':>8} {'pymapf ms':>9} {'ratio':>7} {'analyse ms':>10}"
    )
    disagreements = 0
    all_ratios, all_times = {}, {}
    for agents in args.agents:
        for size in args.sizes:
            ours_t, theirs_t, analyse_t, ratios = [], [], [], []
            solved_ours = solved_theirs = agree = n = 0
            for k in range(args.per_cell):
                hole_ratio = HOLE_RATIOS[k % len(HOLE_RATIOS)]
                if free_cells(size, hole_ratio) < 2 * agents:
                    continue
                spec = InstanceSpec("bench", size, agents, hole_ratio, want_wait=False, seed=0)
                layout = _draw(random.Random(f"{args.seed}/{agents}/{size}/{k}"), spec)
                if layout is None:
                    continue
                holes, starts, goals = layout
                n += 1
                ours, t_ours = timed(solve, size, holes, starts, goals, "sum_of_costs", limits=limits)
                theirs, t_theirs = timed(pymapf_soc, size, holes, starts, goals, args.time_limit)
                _, t_analyse = timed(analyse, size, holes, starts, goals, limits)
                ours_soc = None if ours is None else ours.sum_of_costs
                solved_ours += ours_soc is not None
                solved_theirs += theirs is not None
                if ours_soc is not None and theirs is not None:
                    agree += ours_soc == theirs
                    disagreements += ours_soc != theirs
                    ours_t.append(t_ours)
                    theirs_t.append(t_theirs)
                    ratios.append(t_theirs / t_ours)
                    analyse_t.append(t_analyse)
            if not ratios:
                continue
            all_ratios[(agents, size)] = ratios
            all_times[(agents, size)] = (ours_t, theirs_t)
            print(
                f"{agents:>6} {size:>4} {n:>3} {solved_ours:>5} {solved_theirs:>6} {agree:>5} "
                f"{1e3 * statistics.median(ours_t):>8.2f} {1e3 * statistics.median(theirs_t):>9.2f} "
                f"{statistics.median(ratios):>6.1f}x {1e3 * statistics.median(analyse_t):>10.2f}"
            )
    every = [r for rs in all_ratios.values() for r in rs]
    if every:
        print(
            f"\nmedian time ratio pymapf CBS / ours over {len(every)} instances solved by both: "
            f"{statistics.median(every):.1f}x"
        )
    five_ten = all_ratios.get((5, 10))
    if five_ten:
        ours_t, theirs_t = all_times[(5, 10)]
        print(
            f"5 agents, 10x10 over {len(five_ten)} instances: median of per-instance ratios "
            f"{statistics.median(five_ten):.1f}x, ratio of median times "
            f"{statistics.median(theirs_t) / statistics.median(ours_t):.1f}x (target >= 5x)"
        )
    print(f"optimal sums of costs disagree on {disagreements} instances")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
