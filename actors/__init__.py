"""The RL loop on Ray: rollout workers, the trajectory buffer, the DeepSpeed learner group, the trainer that
chains them into GRPO steps, validation, the environment engineer and its baselines, the main job (rounds of
train -> validate -> propose), pretraining and the warm start, checkpoints, metrics and the run report."""
