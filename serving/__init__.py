"""Policy model and its vLLM deployment on Ray Serve: not built yet (issue 3)."""
