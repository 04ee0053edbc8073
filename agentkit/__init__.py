"""agentkit: a function-calling agent framework on an embedded block-diffusion language-model runtime."""

__version__ = "0.1.0"
