"""agentkit's embedded block-diffusion runtime for DiffusionGemma-architecture checkpoints: loading
(:mod:`model.checkpoint`), the denoising loop (:mod:`model.runtime`) and the constraints applied during it
(:mod:`model.constraints`). Imports only :mod:`grammar`, :mod:`schema` and :mod:`dg_kernels` of the project."""

__version__ = "0.1.0"
