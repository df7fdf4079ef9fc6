import pytest

from env.config import count_with_ratio, default_config, project
from env.generator import GenerationError, InstanceSpec, generate, make_instance


def test_same_config_same_bytes_sequential_or_parallel():
    config = default_config(num_agents=2, num_instances=40, seed=5)
    first, _ = generate(config)
    second, _ = generate(config, workers=2)
    assert [i.to_json() for i in first] == [i.to_json() for i in second]
    other, _ = generate(config.model_copy(update={"seed": 6}))
    assert [i.to_json() for i in other] != [i.to_json() for i in first]


def test_ratios_are_honoured():
    raw = {
        "sizes": {
            4: {"data_ratio": 0.25, "hole_ratio": 0.25, "wait_ratio": 0.5},
            7: {"data_ratio": 0.75, "hole_ratio": 0.3, "wait_ratio": 0.2},
        },
        "num_agents": 2,
        "num_instances": 40,
        "seed": 1,
    }
    config, notes = project(raw)
    assert notes == []
    instances, report = generate(config)
    assert len(instances) == 40 and report.shortfalls == []
    for size, count in config.instance_counts().items():
        knobs = config.sizes[size]
        group = [i for i in instances if i.size == size]
        assert len(group) == count
        assert all(len(i.holes) == round(knobs.hole_ratio * size * size) for i in group)
        assert sum(i.requires_wait for i in group) == count_with_ratio(count, knobs.wait_ratio)
    for inst in instances:
        starts, goals = list(map(tuple, inst.starts)), list(map(tuple, inst.goals))
        assert len(set(starts)) == len(set(goals)) == inst.num_agents
        assert all(s != g for s, g in zip(starts, goals))
        assert not (set(starts) | set(goals)) & set(map(tuple, inst.holes))


def test_impossible_wait_is_a_recorded_shortfall_not_a_hang():
    # one agent can never need a WAIT
    spec = InstanceSpec(id="x", size=3, num_agents=1, hole_ratio=0.0, want_wait=True, seed=1)
    result = make_instance(spec)
    assert result.instance is not None and not result.instance.requires_wait and result.wait_shortfall
    config, _ = project(
        {"sizes": {3: {"data_ratio": 1, "hole_ratio": 0, "wait_ratio": 1}}, "num_agents": 1, "num_instances": 3}
    )
    instances, report = generate(config)
    assert len(instances) == 3
    assert report.shortfalls == ["size 3: 0 of 3 WAIT instances"]


def test_too_many_agents_is_a_clear_error():
    spec = InstanceSpec(id="x", size=3, num_agents=8, hole_ratio=0.6, want_wait=False, seed=1)
    with pytest.raises(GenerationError, match="too few free cells"):
        make_instance(spec)
