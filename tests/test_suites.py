from actors.model_card import markdown_table
from env.benchmark import BENCHMARK, VALIDATION, ScoreTable, build, checksum, parse_id, score
from env.evaluate import evaluate
from env.instance import read_instances
from env.prompt import format_answer


def test_shipped_suites_match_their_checksums_and_spec():
    for suite in (BENCHMARK, VALIDATION):
        assert checksum(suite.path) == suite.checksum_path.read_text().split()[0]
    bench = read_instances(BENCHMARK.path)
    assert len(bench) == 3150 == len(BENCHMARK.specs())
    cells = {(i.num_agents, i.size) for i in bench}
    assert cells == {(a, s) for a in (3, 4, 5) for s in range(max(3, a), 11)}
    for instance in bench:
        cell = parse_id(instance.id)
        assert (cell["agents"], cell["size"]) == (instance.num_agents, instance.size)
        assert abs(instance.hole_ratio - cell["holes"]) <= 0.5 / instance.size**2 + 1e-9  # the id's hole level
    for wait in (0.25, 0.5, 0.75):
        subset = [i for i in bench if parse_id(i.id)["wait"] == wait]
        assert len(subset) == 50 * 21
        assert sum(i.requires_wait for i in subset) == 21 * int(50 * wait + 0.5)
    validation = read_instances(VALIDATION.path)
    assert {i.num_agents for i in validation} == {2, 3, 4, 5}
    assert not {i.seed for i in validation} & {i.seed for i in bench}


def test_rebuilding_cells_is_bit_identical():
    shipped = {i.id: i.to_json() for i in read_instances(BENCHMARK.path)}
    cells = [(3, 4, 0.75), (5, 10, 0.5)]
    rebuilt = build(BENCHMARK, workers=1, cells=cells)
    assert len(rebuilt) == 100
    assert all(shipped[i.id] == i.to_json() for i in rebuilt)


def test_score_table_matches_hand_count():
    instances = [i for i in read_instances(VALIDATION.path) if i.num_agents == 2]
    verdicts = {}
    for k, inst in enumerate(instances):
        text = format_answer(inst.solution) if k % 2 == 0 else "no answer"
        verdicts[inst.id] = evaluate(inst, text)
    table = score(instances, verdicts)
    for size, rate in table.acc[2].items():
        group = [i for i in instances if i.size == size]
        expected = 100 * sum(verdicts[i.id].valid for i in group) / len(group)
        assert rate == expected
    assert abs(table.sum_acc(2) - sum(table.acc[2].values()) / 8) < 1e-9
    assert "| 2 |" in table.to_markdown()
    # missing responses count as failures
    assert score(instances, {}).sum_acc(2) == 0.0


def test_every_shipped_instance_round_trips_valid_and_optimal():
    """solver plan -> answer text -> parse -> evaluate is valid and optimal for every suite instance."""
    for suite in (BENCHMARK, VALIDATION):
        for instance in read_instances(suite.path):
            verdict = evaluate(instance, format_answer(instance.solution))
            assert verdict.valid and verdict.optimal, (instance.id, verdict.failure, verdict.detail)
            assert verdict.makespan == instance.optimal_makespan
            assert verdict.sum_of_costs >= instance.optimal_sum_of_costs


def test_suite_instances_filter_agents_sizes_and_cells():
    from actors.validation import suite_instances

    chosen = suite_instances(VALIDATION, agents=[2], per_cell=2, sizes=[3, 5])
    cells = [parse_id(i.id) for i in chosen]
    assert {(c["agents"], c["size"]) for c in cells} == {(2, 3), (2, 5)}
    assert all(c["index"] < 2 for c in cells)
    assert len(chosen) == 2 * 3 * 2  # sizes x wait subsets x per_cell
    assert len(suite_instances(VALIDATION, agents=[2])) > len(chosen)


def test_the_papers_table_has_a_column_per_size_and_a_dash_where_a_size_is_missing():
    """ScoreTable.to_markdown and the model card write the same layout (env.markdown.size_table)."""
    table = ScoreTable(
        acc={3: {3: 50.0, 4: 25.0}, 4: {4: 10.0}},
        opt={3: {3: 50.0, 4: 20.0}, 4: {4: 10.0}},
        counts={3: {3: 2, 4: 4}, 4: {4: 10}},
    )
    expected = [
        "| agents | 3x3 | 4x4 | Sum |",
        "|---|---|---|---|",
        "| 3 | 50.00/50.00 | 25.00/20.00 | 37.50/35.00 |",
        "| 4 | - | 10.00/10.00 | 10.00/10.00 |",
    ]
    assert table.to_markdown().splitlines() == expected
    card = markdown_table(table.to_dict()).splitlines()
    assert card[:2] == expected[:2] and card[3] == "| 4 | - | 10.0/10.0 | 10.00/10.00 |"
