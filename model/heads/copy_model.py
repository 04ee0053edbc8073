"""``DiffusionGemmaWithCopyHead``: ``transformers.DiffusionGemmaForBlockDiffusion`` with a
:class:`~model.heads.copy_head.CopyHead`, selected by a ``copy_head`` entry in ``config.json``."""

from __future__ import annotations

from typing import Any

import torch
from transformers import DiffusionGemmaForBlockDiffusion
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import (
    DiffusionGemmaBlockDiffusionOutputWithPast,
)

from model.heads.copy_head import CopyHead, CopyHeadConfig, CopyMemory


def softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``tanh(logits / cap) * cap`` in float32 (transformers' final soft-capping); in place outside autograd (the
    ``lm_head`` output is fresh)."""
    logits = logits.float()
    if not cap:
        return logits
    if torch.is_grad_enabled():
        return torch.tanh(logits / cap) * cap
    return logits.div_(cap).tanh_().mul_(cap)


class DiffusionGemmaWithCopyHead(DiffusionGemmaForBlockDiffusion):  # type: ignore[misc]
    """``DiffusionGemmaForBlockDiffusion`` plus a :class:`CopyHead`.

    ``forward`` takes the base model's arguments, by keyword, plus ``copy_memory``. With a memory, or with
    ``input_ids`` (the memory is then built from the encoder's states), ``logits`` is the ``[B, C, V]`` float32
    log-mixture; with neither, the call is the base model's. Raises ValueError at construction for a missing or
    malformed ``config.copy_head``."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        raw = getattr(config, "copy_head", None)
        if not isinstance(raw, dict):
            raise ValueError("DiffusionGemmaWithCopyHead needs a `copy_head` dict in the model config")
        text = config.get_text_config()
        self.copy_head = CopyHead(text.hidden_size, text.vocab_size, CopyHeadConfig.from_dict(raw))

    def _init_weights(self, module: Any) -> None:
        if isinstance(module, CopyHead):
            module.reset_parameters()
            return
        head = self._modules.get("copy_head")
        if head is not None and any(module is m for m in head.modules()):
            return
        super()._init_weights(module)

    def forward(self, *, copy_memory: CopyMemory | None = None, **inputs: Any) -> Any:  # type: ignore[override]
        """The base forward's keyword arguments; with a copy memory (given, or built from ``input_ids``) the logits
        are the log-mixture."""
        if copy_memory is None and inputs.get("input_ids") is None:
            return super().forward(**inputs)

        out = self.model(**inputs)
        if copy_memory is None:
            copy_memory = self.copy_head.new_memory(
                inputs["input_ids"], out.encoder_last_hidden_state, inputs.get("attention_mask")
            )
        h = out.last_hidden_state
        vocab_logits = softcap(self.lm_head(h), self.final_logit_softcapping)
        ptr = self.copy_head.pointer(h, inputs["decoder_input_ids"], copy_memory)
        logits = self.copy_head.mixture_logits(vocab_logits, ptr, copy_memory)
        return DiffusionGemmaBlockDiffusionOutputWithPast(
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            cache=out.cache,
            encoder_last_hidden_state=out.encoder_last_hidden_state,
        )
