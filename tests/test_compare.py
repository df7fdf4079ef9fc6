import json
from pathlib import Path

import pytest

from env.benchmark import VALIDATION, parse_id
from env.compare import CompareError, compare, mcnemar_p, read_scored, to_markdown
from tests.test_cli import cli

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def eval_file(path: Path, scored: list[str], valid: set[str], optimal: set[str]) -> Path:
    """What ``envengineer eval --out`` writes, reduced to the fields the comparison reads."""
    rows = [{"id": i, "valid": i in valid, "optimal": i in optimal, "answer": "..."} for i in scored]
    path.write_text(json.dumps({"suite": "validation", "table": {}, "verdicts": rows}))
    return path


def test_mcnemar_p_values_match_the_binomial_test():
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(3, 3) == 1.0
    assert mcnemar_p(6, 0) == pytest.approx(2 / 64)  # all six changes one way
    assert mcnemar_p(20, 8) == pytest.approx(0.0357, abs=1e-4) == mcnemar_p(8, 20)  # scipy.stats.binomtest


def test_pairs_count_gains_and_losses_and_sums_average_over_sizes(tmp_path):
    two = [s.id for s in VALIDATION.specs() if parse_id(s.id)["agents"] == 2]
    on_3x3 = [i for i in two if parse_id(i)["size"] == 3]  # 15 instances a size (3 wait subsets x 5)
    on_4x4 = [i for i in two if parse_id(i)["size"] == 4]
    a = eval_file(tmp_path / "a.json", two, set(on_3x3[:6]), set(on_3x3[:3]))
    b = eval_file(tmp_path / "b.json", two, set(on_3x3[2:9]) | set(on_4x4[:3]), set(on_3x3[2:9]))
    (row,) = compare(read_scored(a), read_scored(b))
    assert row.agents == 2 and row.instances == len(two) == 8 * 15
    assert row.valid == (3 + 3, 2)  # B adds 3x3 #6-8 and three 4x4, loses 3x3 #0-1
    assert row.optimal == (7 - 1, 2)  # B's optimal 3x3 #2-8 against A's #0-2
    assert row.first == pytest.approx((100 * 6 / 15 / 8, 100 * 3 / 15 / 8))  # one size at 40%, seven at 0
    assert row.second == pytest.approx((100 * (7 + 3) / 15 / 8, 100 * 7 / 15 / 8))
    assert row.valid_p == pytest.approx(mcnemar_p(6, 2))
    assert "| 2 | 120 | 5.0/2.5 | 8.3/5.8 | +3.3/+3.3 | 6/2 (p 0.29) | 6/2 (p 0.29) |" in to_markdown(
        read_scored(a), read_scored(b), [row]
    )


def test_a_runs_benchmark_record_reads_as_the_same_scores(tmp_path):
    two = [s.id for s in VALIDATION.specs() if parse_id(s.id)["agents"] == 2]
    a = eval_file(tmp_path / "a.json", two, set(two[:5]), set(two[:2]))
    record = {"table": {}, "markdown": "", "scored": two, "valid": two[:5], "optimal": two[:2]}  # actors.job
    (tmp_path / "benchmark.json").write_text(json.dumps(record))
    b = read_scored(tmp_path / "benchmark.json")
    assert (b.scored, b.valid, b.optimal) == (read_scored(a).scored, read_scored(a).valid, read_scored(a).optimal)


def test_solved_ids_are_what_a_scored_record_keeps_sorted():
    from env.compare import solved_ids
    from env.evaluate import Verdict

    def verdict(i: str, valid: bool, optimal: bool) -> Verdict:
        return Verdict(i, valid, optimal, optimal, None, None, None if valid else "hole", None, None, "")

    verdicts = [verdict("b", True, False), verdict("a", True, True), verdict("c", False, False)]
    assert solved_ids(verdicts) == {"valid": ["a", "b"], "optimal": ["a"]}
    assert solved_ids(iter(verdicts)) == solved_ids(verdicts)  # any iterable, read once


def test_committed_rescore_records_give_the_tables_and_splits_of_their_summary():
    """The shipped RL model's run (its seed-0 trial) against its start, from the committed records: the same
    Sums as each record's own table, and the split docs/results.md quotes (116 gained, 47 lost on 3 agents)."""
    start = RESULTS / "sweep-grpo-kl" / "shared" / "start" / "rescore" / "full-benchmark.json"
    trial = RESULTS / "sweep-grpo-kl" / "runs" / "kl-0.1-9-rounds-s0" / "rescore" / "full-benchmark.json"
    rows = compare(read_scored(start), read_scored(trial))
    assert [(r.agents, r.instances) for r in rows] == [(3, 1200), (4, 1050), (5, 900)]
    for path, side in ((start, "first"), (trial, "second")):
        table = json.loads(path.read_text())["table"]
        for r in rows:
            sums = table[str(r.agents)]["sum"]
            assert getattr(r, side) == pytest.approx((sums["acc"], sums["opt"]))
    assert [r.valid for r in rows] == [(116, 47), (80, 41), (38, 21)]
    assert "6.5e-08" in to_markdown(read_scored(start), read_scored(trial), rows)

    by_size = compare(read_scored(start), read_scored(trial), by_size=True)
    assert [r for r in by_size if r.size is None] == rows  # each agent count's Sum row, after its sizes
    table = json.loads(trial.read_text())["table"]
    for agents in (3, 4, 5):
        cells = [r for r in by_size if r.agents == agents and r.size is not None]
        assert [r.size for r in cells] == list(range(agents, 11)) and {r.instances for r in cells} == {150}
        assert sum(r.valid[0] for r in cells) == rows[agents - 3].valid[0]  # the gains add up to the Sum's
        for r in cells:
            assert r.second == pytest.approx((table[str(agents)]["sizes"][str(r.size)]["acc"],
                                              table[str(agents)]["sizes"][str(r.size)]["opt"]))  # fmt: skip
    result = cli("compare", start, trial, "--by-size")
    assert "| 3 | 4x4 | 150 | 30.0/29.3 | 40.7/33.3 | +10.7/+4.0 | 19/3 (p 0.00086) |" in result.stdout
    assert "| 3 | Sum | 1200 | 25.7/24.6 | 31.4/25.8 | +5.7/+1.2 | 116/47 (p 6.5e-08) |" in result.stdout

    by_holes = compare(read_scored(start), read_scored(trial), by_holes=True)
    assert [r for r in by_holes if r.holes is None] == rows
    for agents in (3, 4, 5):
        cells = [r for r in by_holes if r.agents == agents and r.holes is not None]
        assert [r.holes for r in cells] == [0.0, 0.1, 0.2, 0.3]
        per_size = rows[agents - 3].instances // 150  # instance k of a 50-instance subset: hole level k % 4
        assert [r.instances for r in cells] == [39 * per_size, 39 * per_size, 36 * per_size, 36 * per_size]
        assert sum(r.valid[0] for r in cells) == rows[agents - 3].valid[0]
    assert [r.valid[0] - r.valid[1] for r in by_holes if r.agents == 3][:4] == [32, 26, 4, 7]  # full-benchmark.md's
    result = cli("compare", start, trial, "--by-holes")
    assert "| agents | part | instances |" in result.stdout and "| 3 | holes 0.3 | 288 |" in result.stdout


def test_what_cannot_be_compared_is_refused_with_the_reason(tmp_path):
    two = [s.id for s in VALIDATION.specs() if parse_id(s.id)["agents"] == 2]
    full = eval_file(tmp_path / "full.json", two, set(), set())
    part = eval_file(tmp_path / "part.json", two[:30], set(), set())
    with pytest.raises(CompareError, match="different instances .120 and 30, 30 in common"):
        compare(read_scored(full), read_scored(part))
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "old-benchmark.json").write_text(json.dumps({"table": {}, "markdown": ""}))
    (tmp_path / "numbers.json").write_text(json.dumps({"scored": [1, 2], "valid": [], "optimal": []}))
    (tmp_path / "suite.json").write_text(json.dumps({"suite": ["x"], "per_cell": None, "valid": [], "optimal": []}))
    (tmp_path / "config.json").write_text(json.dumps({"sizes": {}}))
    stray = eval_file(tmp_path / "stray.json", ["my/own/instance"], set(), set())
    unsound = eval_file(tmp_path / "unsound.json", two[:4], set(), {two[0]})
    for path, reason in (
        (tmp_path / "text.json", "not a readable JSON file"),
        (tmp_path / "config.json", "not a scored record"),
        (tmp_path / "old-benchmark.json", "holds the table only"),
        (tmp_path / "numbers.json", "'scored' is not a list of instance ids"),
        (tmp_path / "suite.json", "unknown suite"),
        (stray, "not suite instance ids"),
        (unsound, "optimal ones that are not valid"),
        (tmp_path / "missing.json", "not a readable JSON file"),
    ):
        with pytest.raises(CompareError, match=reason):
            read_scored(path)
    result = cli("compare", full, part, check=False)
    assert result.returncode == 2 and "error:" in result.stderr and "different instances" in result.stderr
    result = cli("compare", full, full)
    assert "| 2 | 120 | 0.0/0.0 | 0.0/0.0 | +0.0/+0.0 | 0/0 (p 1) | 0/0 (p 1) |" in result.stdout
