"""A Hugging Face Llama trained on a synthetic Markov language (net, norms, data, module,
callbacks)."""
