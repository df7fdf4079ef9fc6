import subprocess
import sys
import warnings

import gymnasium
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

import env
from env.benchmark import VALIDATION
from env.grid import MOVE_NAMES
from env.instance import read_instances
from env.prompt import format_answer


def test_gymnasium_text_env_passes_check_env():
    made = gymnasium.make(env.gym_env.ENV_ID)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(made.unwrapped)
    assert [str(w.message) for w in caught] == []
    prompt, info = made.reset(seed=0)
    instance = made.unwrapped.by_id[info["instance_id"]]
    _, reward, terminated, truncated, verdict = made.step(format_answer(instance.solution))
    assert terminated and not truncated and reward == 1.5 and verdict["optimal"]
    made.reset(options={"instance_id": instance.id})
    _, reward, _, _, verdict = made.step("nonsense")
    assert reward == 0.0 and verdict["failure"] == "parse_error"


def test_pettingzoo_parallel_env_passes_api_test():
    instances = read_instances(VALIDATION.path)
    for instance in instances[:3] + instances[-2:]:
        parallel_api_test(env.parallel_env(instance), num_cycles=200)


def test_parallel_env_follows_the_evaluators_rules():
    instance = next(i for i in read_instances(VALIDATION.path) if i.requires_wait)
    par = env.parallel_env(instance)
    par.reset(seed=0)
    horizon = max(len(m) for m in instance.solution)
    for t in range(horizon):
        actions = {
            agent: MOVE_NAMES.index(moves[t] if t < len(moves) else "WAIT")
            for agent, moves in zip(par.possible_agents, instance.solution)
        }
        _, rewards, terms, truncs, infos = par.step(actions)
    assert all(terms.values()) and not any(truncs.values())
    assert set(rewards.values()) == {1.5} and par.agents == []
    # everyone moving UP from the start soon breaks a rule
    par.reset()
    for _ in range(instance.size + 1):
        _, rewards, terms, _, infos = par.step({a: MOVE_NAMES.index("UP") for a in par.agents})
        if any(terms.values()):
            break
    assert infos[par.possible_agents[0]]["failure"] in ("off_grid", "hole", "vertex_conflict", "edge_conflict")


def test_env_imports_nothing_from_ray_torch_or_vllm():
    code = (
        "import sys, env, env.generator, env.solver, env.evaluate, env.benchmark, env.render, env.pettingzoo_env;"
        "bad = [m for m in ('ray', 'torch', 'vllm', 'deepspeed', 'transformers') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
