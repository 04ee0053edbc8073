"""DiffusionGemma configurations for the project's own small checkpoints (the embedded default and tests). Every
layer carries a router and experts (``num_experts=1`` is the nearest to dense) and a vision tower is always built (a
tiny one here); ``global_head_dim`` and ``layer_types`` are passed explicitly, image ids inside the project's
vocabulary."""

from __future__ import annotations

from typing import Any

from grammar import special_tokens as st


def tiny_vision_config() -> Any:
    """A ~20k-parameter ``gemma4_vision`` sub-config."""
    from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig

    return Gemma4VisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=16,
        patch_size=16,
        position_embedding_size=64,
    )


def small_config(
    vocab_size: int,
    hidden_size: int,
    num_layers: int,
    *,
    intermediate_size: int | None = None,
    moe_intermediate_size: int | None = None,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    head_dim: int = 32,
    canvas_length: int = 16,
    num_experts: int = 1,
    top_k_experts: int = 1,
    max_position_embeddings: int = 4096,
    sliding_window: int = 128,
) -> Any:
    """A small ``transformers.DiffusionGemmaConfig``.

    Args:
        vocab_size, hidden_size, num_layers: model size (layers alternate sliding and full attention, the last full).
        intermediate_size: dense MLP width (default ``2 * hidden_size``).
        moe_intermediate_size: expert width (default ``hidden_size``).
        num_heads, num_kv_heads, head_dim: attention shape (``global_head_dim = head_dim``).
        canvas_length: tokens per canvas.
        num_experts, top_k_experts: MoE shape.
        max_position_embeddings, sliding_window: positions and sliding-attention window."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaTextConfig

    layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
    layer_types[-1] = "full_attention"
    # the top config consumes the ids and the text config global_head_dim in __post_init__ (not declared fields,
    # hence passed through dicts)
    ids: dict[str, Any] = {"pad_token_id": st.PAD_ID, "eos_token_id": st.EOS_ID, "bos_token_id": st.BOS_ID}
    extra_text: dict[str, Any] = {"global_head_dim": head_dim}
    text = DiffusionGemmaTextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or hidden_size * 2,
        moe_intermediate_size=moe_intermediate_size or hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        layer_types=layer_types,
        num_experts=num_experts,
        top_k_experts=top_k_experts,
        max_position_embeddings=max_position_embeddings,
        sliding_window=sliding_window,
        **ids,
        **extra_text,
    )
    return DiffusionGemmaConfig(
        text_config=text,
        vision_config=tiny_vision_config(),
        canvas_length=canvas_length,
        boi_token_id=st.SPECIAL_IDS[st.IMAGE_START],
        eoi_token_id=st.SPECIAL_IDS[st.IMAGE_END],
        image_token_id=st.SPECIAL_IDS[st.IMAGE_TOKEN],
        **ids,
    )
