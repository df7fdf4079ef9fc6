"""Ray Tune ablation sweeps: not built yet (issue 6)."""
