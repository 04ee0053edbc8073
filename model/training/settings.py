"""Training settings (:class:`TrainConfig`) and the model they describe (config, weights, generation config)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from grammar import special_tokens as st
from model.checkpoint.config import small_config
from model.threads import MAX_THREADS

#: Copy-head rules that a training option turns on (``TrainConfig`` fields named as the ``copy_head`` keys).
COPY_HEAD_RULES = ("spaced_word_starts", "answer_match_responses")

#: Option types with their ranges (pydantic checks them; ``ValidationError``, a ``ValueError``, names the field).
Unit = Annotated[float, Field(ge=0, le=1)]  # shares and probabilities
NonNegative = Annotated[float, Field(ge=0)]  # loss weights and the weight decay
Positive = Annotated[int, Field(ge=1)]  # counts and sizes
Steps = Annotated[int, Field(ge=0)]  # step counts that may be 0, stage numbers
Finite = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # above 0: the lr, gradient clip, minutes


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass
class TrainConfig:
    """All knobs of a training run (saved as ``train_config.json`` next to the checkpoints).

    Each attribute is also a ``python -m model.training`` option (``--field-name``; the text below is its
    ``--help``). Sizes are in tokens, times in minutes. pydantic's ``ValidationError`` (a ``ValueError``) naming
    the option for one out of its range or one that needs another.

    Attributes:
        out_dir: Folder of the run: tokenizer, checkpoints, logs and train_config.json.
        final_dir: Folder of the final checkpoint (default: OUT_DIR/final).
        seed: Seed of the data generators, the initial weights and the noise draws.
        device: Torch device: cpu or cuda.
        threads: torch.set_num_threads for the run (CPU).
        steps: Optimizer steps of the learning-rate schedule.
        stop_at: Stop (and save) after this many steps while keeping the schedule of STEPS.
        max_minutes: Fit the step count to this wall-clock budget (minutes), timed on the first 20 steps.
        batch_size: Examples per optimizer step.
        lr: AdamW's peak learning rate (above 0).
        min_lr_ratio: Floor of the cosine schedule, as a fraction of LR.
        warmup: Linear warm-up steps.
        weight_decay: AdamW weight decay.
        grad_clip: Gradient-norm clip.
        maskbench: MaskBench schemas (.jsonl.gz) of the Glaive tools (default: ../shared's; missing: none).
        n_train: Training examples generated.
        n_heldout: Held-out examples for the periodic evaluation.
        tokenizer_examples: Training examples the BPE tokenizer is trained on (a fresh run only).
        vocab_size: Vocabulary size of a fresh tokenizer and model.
        hidden_size: Model width.
        intermediate_size: Width of the dense MLP.
        moe_intermediate_size: Width of each expert's MLP.
        num_layers: Transformer layers (sliding and full attention alternate; the last is full).
        num_heads: Attention heads.
        num_kv_heads: Key/value heads (grouped-query attention).
        head_dim: Width of one attention head.
        canvas_length: Tokens per canvas (the decoder's block).
        max_prompt: Prompt tokens kept per example (the last ones).
        space_tokens: Spaces as their own pre-tokens in a fresh tokenizer.
        copy_weight: Extra loss weight on copied value tokens.
        decision_weight: Loss weight factor of a turn's first token and of the token after each call (call or
            answer; another call or the end).
        ar_weight: Weight of the encoder's autoregressive loss (MAX_PROMPT + CANVAS_LENGTH < SLIDING_WINDOW).
        terse_p: Share of the examples whose tool declarations lose their descriptions.
        drill_steps: First steps on the copy drill only (terse single calls); give STEPS, not MAX_MINUTES.
        copy_head: Build and train DiffusionGemmaWithCopyHead (model/heads/copy_head.py) with the copy losses.
        copy_dim: Width of the copy head's binding space (its free space is half of it).
        spaced_word_starts: A copied token is spaced only where it starts a source word (needs --copy-head).
        answer_match_responses: After a tool response the copy head matches only the responses (needs --copy-head).
        noise_draws: Decoder passes, each with its own noise level, per encoder pass.
        prefix_clean_p: Share of canvases with a clean prefix, mostly noise after it (as prefix commits leave).
        bot_share: Share of the training stream in the example bots' domains (default: the generator's 16%).
        decline_share: Share of the training stream that declines in prose (default: the generator's 11%).
        paired_declines: Follow each request for another tool's job with the same request, its tool offered, called.
        bind_weight: Weight of the binding loss (request tokens against the declared parameters).
        key_weight: Weight of the parameter loss (value tokens against the parameter they fill).
        ptr_weight: Weight of the pointer's own loss.
        none_weight: Weight of the "none" request tokens inside the binding loss.
        init_from: Checkpoint folder whose weights (and tokenizer) start the run; weights it lacks start fresh.
        align_copies: Spell copied target words with their prompt tokens where BPE splits them otherwise.
        sliding_window: Sliding-window size of the local attention layers.
        max_position_embeddings: Longest sequence the model's positions cover.
        self_cond_p: Probability per example of a detached self-conditioning pass.
        pad_weight: Loss weight of canvas positions after the end of the target.
        ckpt_every: Steps between checkpoints.
        eval_every: Steps between held-out evaluations.
        log_every: Steps between log lines.
        bucket_mult: Batches per length bucket (examples are sorted by length within BATCH_SIZE x BUCKET_MULT).
        resume: Continue from the trainer state in OUT_DIR when there is one.
        stage: Train stage N of a staged retrain (model/training/stages.py): 0 starts a fresh tokenizer and
            model, N >= 1 starts from stage N-1's weights, tokenizer and optimizer moments; exactly STEPS steps.
        stages_dir: Folder of the stage folders (stage-0, stage-1, ...) of a staged retrain.
        from_stage: Start stage N from stage K (0 <= K < N) instead of N-1; the later stages stay as they are.
    """

    out_dir: str = "runs/agentkit-tiny"
    final_dir: str | None = None
    seed: int = 0
    device: str = "cpu"
    threads: Annotated[int, Field(ge=1, le=MAX_THREADS)] = 1
    steps: Positive = 3000
    stop_at: Positive | None = None
    max_minutes: Finite | None = None
    batch_size: Positive = 16
    lr: Finite = 2e-3
    min_lr_ratio: Unit = 0.1
    warmup: Steps = 100
    weight_decay: NonNegative = 0.01
    grad_clip: Finite = 1.0
    maskbench: str = ""
    n_train: Positive = 60000
    n_heldout: Positive = 512
    tokenizer_examples: Positive = 20000
    vocab_size: Positive = 8192
    hidden_size: Positive = 256
    intermediate_size: Positive = 768
    moe_intermediate_size: Positive = 256
    num_layers: Positive = 4
    num_heads: Positive = 4
    num_kv_heads: Positive = 2
    head_dim: Positive = 64
    canvas_length: Positive = 64
    max_prompt: Positive = 512
    space_tokens: bool = False
    copy_weight: NonNegative = 0.0
    decision_weight: NonNegative = 1.0
    ar_weight: NonNegative = 0.0
    terse_p: Unit = 0.0
    drill_steps: Steps = 0
    copy_head: bool = False
    copy_dim: Positive = 64
    spaced_word_starts: bool = False
    answer_match_responses: bool = False
    noise_draws: Positive = 1
    prefix_clean_p: Unit = 0.0
    bot_share: Annotated[float, Field(ge=0, lt=1)] | None = None
    decline_share: float | None = None
    paired_declines: bool = False
    bind_weight: NonNegative = 1.0
    key_weight: NonNegative = 0.5
    ptr_weight: NonNegative = 0.5
    none_weight: NonNegative = 0.3
    init_from: str = ""
    align_copies: bool = False
    sliding_window: Positive = 256
    max_position_embeddings: Positive = 2048
    self_cond_p: Unit = 0.5
    pad_weight: NonNegative = 0.25
    ckpt_every: Positive = 250
    eval_every: Positive = 250
    log_every: Positive = 10
    bucket_mult: Positive = 32
    resume: bool = True
    stage: Steps | None = None
    stages_dir: str = ""
    from_stage: Steps | None = None

    def __post_init__(self) -> None:
        for rule in COPY_HEAD_RULES:
            if getattr(self, rule) and not self.copy_head:
                raise ValueError(f"{_flag(rule)} is a copy-head rule: give --copy-head with it")
        top = 1.0 - (self.bot_share or 0.0)
        if self.decline_share is not None and not 0.0 <= self.decline_share < top:
            raise ValueError(
                f"--decline-share must be in [0, 1 - --bot-share) = [0, {top:g}), got {self.decline_share}"
            )
        if self.num_heads % self.num_kv_heads:  # grouped-query attention; the first forward pass failed
            raise ValueError(
                f"--num-heads ({self.num_heads}) must be a multiple of --num-kv-heads ({self.num_kv_heads})"
            )
        if self.ar_weight > 0 and self.max_prompt + self.canvas_length >= self.sliding_window:
            raise ValueError(
                f"--ar-weight needs --max-prompt + the canvas ({self.max_prompt} + {self.canvas_length}) below "
                f"--sliding-window ({self.sliding_window}): the decoder's sliding layers would lose prompt tokens"
            )
        if self.stage is None:
            if self.stages_dir:
                raise ValueError("--stages-dir needs --stage N (the stage to train)")
            return
        if not self.stages_dir:
            raise ValueError("--stage needs --stages-dir (the folder of the stage folders)")
        if self.max_minutes is not None or self.stop_at is not None:
            raise ValueError("a stage runs exactly --steps steps: leave out --max-minutes and --stop-at")
        if self.stage == 0 and self.from_stage is not None:
            raise ValueError("stage 0 starts a fresh model: leave out --from-stage")


#: The options :func:`model.checkpoint.config.small_config` takes, by its parameter names.
ARCHITECTURE_OPTIONS = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "intermediate_size",
    "moe_intermediate_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "canvas_length",
    "max_position_embeddings",
    "sliding_window",
)
#: Options that shape the model: a stage must give the ones its previous stage was trained with.
MODEL_OPTIONS = (*ARCHITECTURE_OPTIONS, "copy_head", "copy_dim", *COPY_HEAD_RULES)


def build_model_config(cfg: TrainConfig) -> Any:
    """``DiffusionGemmaConfig`` for the embedded checkpoint: :func:`model.checkpoint.config.small_config` sized by ``cfg``."""
    return small_config(**{o: getattr(cfg, o) for o in ARCHITECTURE_OPTIONS})


def build_model(cfg: TrainConfig, tok: Any) -> Any:
    """A fresh model for ``cfg`` (with ``cfg.copy_head``, a ``DiffusionGemmaWithCopyHead`` whose tables come from
    ``tok``), ``cfg.init_from``'s weights loaded where names and shapes match (``ValueError`` if none does)."""
    import transformers

    config = build_model_config(cfg)
    model: Any
    if cfg.copy_head:
        from model.heads.copy_head import CopyHeadConfig
        from model.heads.copy_model import DiffusionGemmaWithCopyHead

        system = tok("system", add_special_tokens=False)["input_ids"]
        config.copy_head = CopyHeadConfig(
            dim=cfg.copy_dim,
            free_dim=cfg.copy_dim // 2,
            turn_start_id=st.SPECIAL_IDS[st.TURN_START],
            turn_end_id=st.SPECIAL_IDS[st.TURN_END],
            excluded_role_ids=system[:1],
            spaced_word_starts=cfg.spaced_word_starts,
            answer_match_responses=(
                [st.SPECIAL_IDS[st.TOOL_RESPONSE_START], st.SPECIAL_IDS[st.TOOL_RESPONSE_END]]
                if cfg.answer_match_responses
                else None
            ),
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
    """``DiffusionGemmaGenerationConfig`` with the project's EOS ids ``[<eos>, <turn|>, <|tool_response>]``:
    :data:`GENERATION_DEFAULTS` and four canvases of budget (``max_new_tokens``), then ``overrides``."""
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        DiffusionGemmaGenerationConfig,
        EntropyBoundSamplerConfig,
    )

    g = {**GENERATION_DEFAULTS, **(overrides or {})}
    return DiffusionGemmaGenerationConfig(
        max_new_tokens=int(g.get("max_new_tokens", canvas_length * 4)),
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=float(g["entropy_bound"])),
        **{k: type(v)(g[k]) for k, v in GENERATION_DEFAULTS.items() if k != "entropy_bound"},
        eos_token_id=list(st.GENERATION_EOS_IDS),
        pad_token_id=st.PAD_ID,
        bos_token_id=st.BOS_ID,
    )
