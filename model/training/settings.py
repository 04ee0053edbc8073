"""Training settings (:class:`TrainConfig`) and the model they describe (config, weights, generation config)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model import special_tokens as st


@dataclass
class TrainConfig:
    """All knobs of a training run (saved as ``train_config.json`` next to the checkpoints).

    Sizes are in tokens; times in minutes; ``lr`` is AdamW's peak learning rate. ``ar_weight``: weight of the
    autoregressive auxiliary loss through the encoder (see :func:`diffusion_loss`; keep ``max_prompt +
    canvas_length`` under ``sliding_window`` when it is on). ``terse_p``: share of training examples whose tool
    declarations lose their descriptions (shorter, cheaper prompts). ``drill_steps``: the first steps train on
    the copy drill only (:func:`model.training.data.copy_drill`: single-turn call examples with only the called
    tools, terse); ``max_minutes`` times the first 20 steps, so with a drill give ``steps`` instead (drill steps
    are faster). ``copy_weight``: extra loss weight on copied value tokens. ``space_tokens``: spaces as their
    own pre-tokens.

    Copy head (:mod:`model.copy_head`): ``copy_head`` builds ``DiffusionGemmaWithCopyHead`` and trains it with
    :func:`copy_diffusion_loss`; ``noise_draws`` decoder passes (each with its own noise level) share one
    encoder pass; ``prefix_clean_p``: share of (example, draw) pairs whose canvas keeps a clean prefix of random
    length and is mostly noise after it (``t ~ U(0.5, 1)`` there): the state the constraint's prefix commit
    leaves at inference, so the frontier token is learned from its left context; ``bind_weight``, ``key_weight``
    and ``ptr_weight`` weight the binding, parameter and pointer
    auxiliary losses, ``none_weight`` the "none" request tokens inside the binding loss. ``init_from``: a
    checkpoint folder whose weights (and tokenizer) start the run; weights it lacks (the copy head) start fresh.
    ``stop_at``: stop (and save) after this many steps while keeping the learning-rate schedule of ``steps``.
    ``bot_share``: share of the training stream in the example bots' domains (default: the generator's 16%).
    ``align_copies``: spell each copied target word with its prompt tokens where BPE splits it differently there
    (:func:`model.training.labels.align_copied_words`), so every copy is reachable token by token.
    """

    out_dir: str = "runs/agentkit-tiny"
    final_dir: str | None = None
    seed: int = 0
    device: str = "cpu"
    threads: int = 1
    steps: int = 3000
    stop_at: int | None = None
    max_minutes: float | None = None
    batch_size: int = 16
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    maskbench: str = ""
    n_train: int = 60000
    n_heldout: int = 512
    tokenizer_examples: int = 20000
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 768
    moe_intermediate_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    canvas_length: int = 64
    max_prompt: int = 512
    space_tokens: bool = False
    copy_weight: float = 0.0
    ar_weight: float = 0.0
    terse_p: float = 0.0
    drill_steps: int = 0
    copy_head: bool = False
    copy_dim: int = 64
    noise_draws: int = 1
    prefix_clean_p: float = 0.0
    bot_share: float | None = None
    bind_weight: float = 1.0
    key_weight: float = 0.5
    ptr_weight: float = 0.5
    none_weight: float = 0.3
    init_from: str = ""
    align_copies: bool = False
    sliding_window: int = 256
    max_position_embeddings: int = 2048
    self_cond_p: float = 0.5
    pad_weight: float = 0.25
    ckpt_every: int = 250
    eval_every: int = 250
    log_every: int = 10
    bucket_mult: int = 32
    resume: bool = True


# --------------------------------------------------------------------------------------------------------------
# Model config
# --------------------------------------------------------------------------------------------------------------


def build_model_config(cfg: TrainConfig) -> Any:
    """``DiffusionGemmaConfig`` for the embedded checkpoint: :func:`model.config.small_config` sized by ``cfg``."""
    from model.config import small_config

    return small_config(
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.num_layers,
        intermediate_size=cfg.intermediate_size,
        moe_intermediate_size=cfg.moe_intermediate_size,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        canvas_length=cfg.canvas_length,
        max_position_embeddings=cfg.max_position_embeddings,
        sliding_window=cfg.sliding_window,
    )


def build_model(cfg: TrainConfig, tok: Any) -> Any:
    """A fresh model for ``cfg``: ``DiffusionGemmaForBlockDiffusion``, or ``DiffusionGemmaWithCopyHead`` (its
    variant tables filled from ``tok``) with ``cfg.copy_head``; ``cfg.init_from`` weights loaded where names and
    shapes match.

    Raises:
        ValueError: if ``cfg.init_from`` has no ``model.safetensors`` or shares no weight with the model.
    """
    import transformers

    config = build_model_config(cfg)
    model: Any
    if cfg.copy_head:
        from model.copy_head import CopyHeadConfig
        from model.copy_model import DiffusionGemmaWithCopyHead

        system = tok("system", add_special_tokens=False)["input_ids"]
        config.copy_head = CopyHeadConfig(
            dim=cfg.copy_dim,
            free_dim=cfg.copy_dim // 2,
            turn_start_id=st.SPECIAL_IDS[st.TURN_START],
            turn_end_id=st.SPECIAL_IDS[st.TURN_END],
            excluded_role_ids=system[:1],
        ).to_dict()
        model = DiffusionGemmaWithCopyHead(config)
        model.copy_head.set_token_tables(tok)
    else:
        model = transformers.DiffusionGemmaForBlockDiffusion(config)
    if cfg.init_from:
        from safetensors.torch import load_file

        f = Path(cfg.init_from) / "model.safetensors"
        if not f.is_file():
            raise ValueError(f"--init-from {cfg.init_from}: no model.safetensors there")
        own = model.state_dict()
        src = {k: v for k, v in load_file(str(f)).items() if k in own and own[k].shape == v.shape}
        if not src:
            raise ValueError(f"--init-from {cfg.init_from}: no weight matches this model's names and shapes")
        model.load_state_dict(src, strict=False)
        model.tie_weights()
    return model


#: Denoising settings shipped in ``generation_config.json`` (tuned on the held-out split; see docs/TRAINING.md).
GENERATION_DEFAULTS: dict[str, Any] = {
    "max_denoising_steps": 32,
    "entropy_bound": 0.1,
    "t_max": 0.1,
    "t_min": 0.02,
    "stability_threshold": 1,
    "confidence_threshold": 0.005,
}


def generation_config(canvas_length: int, overrides: dict[str, Any] | None = None) -> Any:
    """``DiffusionGemmaGenerationConfig`` with the project's EOS ids ``[<eos>, <turn|>, <|tool_response>]``."""
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        DiffusionGemmaGenerationConfig,
        EntropyBoundSamplerConfig,
    )

    g = {**GENERATION_DEFAULTS, **(overrides or {})}
    return DiffusionGemmaGenerationConfig(
        max_new_tokens=canvas_length * 4,
        max_denoising_steps=int(g["max_denoising_steps"]),
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=float(g["entropy_bound"])),
        t_max=float(g["t_max"]),
        t_min=float(g["t_min"]),
        stability_threshold=int(g["stability_threshold"]),
        confidence_threshold=float(g["confidence_threshold"]),
        eos_token_id=list(st.GENERATION_EOS_IDS),
        pad_token_id=st.PAD_ID,
        bos_token_id=st.BOS_ID,
    )
