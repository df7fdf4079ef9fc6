"""Ray Tune sweeps of whole runs (variants x seeds), their specification, summaries and measured costs."""
