"""The one place the runtime reaches into transformers' DiffusionGemma beyond its public forward: two private
helpers of ``DiffusionGemmaForBlockDiffusion`` and two mask builders of its sub-models, checked by
:func:`check_model`. Source: transformers ``models/diffusion_gemma/generation_diffusion_gemma.py`` (5.8 to 5.24)."""

from __future__ import annotations

from typing import Any

import torch

#: The first transformers release with ``models/diffusion_gemma``.
MIN_TRANSFORMERS = "5.8"

_NEEDED = (
    ("", "_prepare_cache_for_generation"),
    ("", "_prepare_encoder_inputs"),
    ("model.decoder", "create_diffusion_decoder_attention_mask"),
    ("model.encoder", "create_masks_for_generate"),
)


def check_model(model: Any) -> None:
    """TypeError when ``model`` is not a torch module (e.g. a ``LoadedCheckpoint``, whose ``.model`` is meant);
    RuntimeError naming the helper and the installed transformers version when it lacks one the runtime calls."""
    if not isinstance(model, torch.nn.Module):
        inner = getattr(model, "model", None)
        hint = "; pass its .model" if isinstance(inner, torch.nn.Module) else ""
        raise TypeError(
            f"model must be transformers' DiffusionGemmaForBlockDiffusion, got {type(model).__name__}{hint}"
        )
    for owner, name in _NEEDED:
        obj: Any = model
        for part in filter(None, owner.split(".")):
            obj = getattr(obj, part, None)
        if not callable(getattr(obj, name, None)):
            import transformers

            where = f"{type(model).__name__}{'.' + owner if owner else ''}.{name}"
            raise RuntimeError(
                f"{where} is missing: transformers {transformers.__version__} is not supported by the denoising "
                f"runtime (needs transformers >= {MIN_TRANSFORMERS} with models/diffusion_gemma; tested up to "
                "5.24)"
            )


def new_cache(model: Any, batch: int, max_length: int) -> Any:
    """An empty KV cache for ``batch`` rows of at most ``max_length`` positions."""
    return model._prepare_cache_for_generation(
        generation_config=model.generation_config, batch_size=batch, max_length=max_length
    )


def encode(
    model: Any,
    ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: Any,
    *,
    is_prefill: bool,
    canvas_length: int,
    images: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, Any]:
    """Run the encoder over ``ids`` (the prompt at prefill, else a committed canvas), writing ``cache``.

    Args:
        model: ``DiffusionGemmaForBlockDiffusion``.
        ids: ``[B, L]`` int64 all tokens so far.
        attention_mask: ``[B, L]`` bool, False at left padding.
        position_ids: ``[1, n]`` int32 positions of the tokens encoded now.
        cache: the KV cache (updated in place).
        is_prefill, canvas_length: as transformers' ``_prepare_encoder_inputs``.
        images: the prefill's image keyword arguments.

    Returns:
        ``(encoded ids [B, n] int64, encoder output)`` with ``.cache`` and ``.last_hidden_state`` ``[B, n, H]``."""
    extra = images or {}
    enc_in, enc_masks = model._prepare_encoder_inputs(
        input_ids=ids,
        attention_mask=attention_mask,
        encoder_position_ids=position_ids,
        cache=cache,
        is_prefill=is_prefill,
        canvas_length=canvas_length,
        batch_size=ids.shape[0],
        **extra,
    )
    out = model.model.encoder(
        input_ids=enc_in, attention_mask=enc_masks, cache=cache, position_ids=position_ids, **extra
    )
    return enc_in, out


def encoder_states(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """The encoder's final states ``[B, L, H]`` over unpadded ``ids`` ``[B, L]`` alone, without a cache (what the
    binding supervision was trained on)."""
    return model.model.encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state


def decoder_mask(model: Any, canvas: torch.Tensor, cache: Any, attention_mask: torch.Tensor) -> Any:
    """The decoder's attention mask for canvas ``[B, C]`` over ``cache`` (``attention_mask`` ``[B, L + C]``)."""
    return model.model.decoder.create_diffusion_decoder_attention_mask(
        config=model.config,
        inputs_embeds=canvas.unsqueeze(-1),
        cache=cache,
        decoder_attention_mask=attention_mask,
    )


def encoder_mask(
    model: Any, rows: int, length: int, attention_mask: torch.Tensor, cache: Any, position_ids: torch.Tensor
) -> Any:
    """The encoder's causal mask for ``rows`` new sequences of ``length`` tokens after ``cache``."""
    return model.model.encoder.create_masks_for_generate(
        config=model.config,
        inputs_embeds=torch.empty((rows, length, 0), dtype=model.dtype, device=attention_mask.device),
        attention_mask=attention_mask,
        cache=cache,
        position_ids=position_ids,
    )


def cache_from_layers(model: Any, layers: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> Any:
    """A ``transformers.DynamicCache`` holding per decoder layer ``(keys, values)`` ``[B, heads, L, head_dim]``,
    having seen ``length`` positions."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config.get_text_config())
    layer: Any
    for layer, (k, v) in zip(cache.layers, layers, strict=True):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = length
    return cache
