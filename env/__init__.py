"""MAPF-FrozenLake: the testbed (config, generator, solver, prompt codec, evaluator, environments, the
evaluation suites and the paired comparison of two policies' scores on them).

Pure Python + numpy + pydantic + pyyaml (+ gymnasium/pettingzoo for the ecosystem wrappers); imports
nothing from Ray, torch or vLLM. Importing it registers the Gymnasium id
``envengineer/MAPFFrozenLake-v0``; ``env.parallel_env(instance)`` gives the PettingZoo environment.
"""

import gymnasium

from env.gym_env import ENV_ID

if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="env.gym_env:MAPFFrozenLakeTextEnv")


def parallel_env(instance, **kwargs):
    """The PettingZoo ``ParallelEnv`` of one instance (see ``env.pettingzoo_env``)."""
    from env.pettingzoo_env import MAPFFrozenLakeParallelEnv

    return MAPFFrozenLakeParallelEnv(instance, **kwargs)
