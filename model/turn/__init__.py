"""One chat turn: rendering, prefill, the prompt's limits, generation and parsing."""
