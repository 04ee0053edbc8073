"""agentkit's embedded block-diffusion runtime for DiffusionGemma-architecture checkpoints.

Loading (:mod:`model.checkpoint.loading`), the denoising loop (:mod:`model.runtime`), the entropy-bound sampler
(:mod:`model.runtime.sampler`), schema constraints applied during denoising (:mod:`model.constraints`) and streaming.
Imports only :mod:`grammar`, :mod:`schema` and :mod:`dg_kernels` among the project's packages.
"""

__version__ = "0.1.0"
