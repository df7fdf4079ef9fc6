"""Ray actors of the RL loop (rollout workers, buffer, learner group, engineer): not built yet (issues 4, 5)."""
