"""The policy model (presets, tokenizer, Hugging Face folders) and its vLLM engine, deployed on Ray Serve with
an OpenAI-compatible route and a weight registry the learners publish new weights to."""
