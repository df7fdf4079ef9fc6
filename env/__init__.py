"""MAPF-FrozenLake: the testbed (config, generator, solver, prompt codec, evaluator, environments).

Pure Python + numpy + pydantic + pyyaml; imports nothing from Ray, torch or vLLM.
"""
