"""Context limits of a checkpoint: how many prompt tokens fit, and the error raised when a prompt does not.

One generation call needs the prompt plus its whole budget within ``max_position_embeddings``, so the longest prompt
is ``max_position_embeddings - ceil(max_new_tokens / canvas_length) * canvas_length``. :func:`check_prompt_length`
checks it before anything of the prompt's size is allocated. No torch import."""

from __future__ import annotations

from typing import Any


class PromptTooLong(ValueError):
    """A prompt does not fit the model's context (all counts in tokens), raised before anything of its size is
    allocated. The one definition: ``agentkit.backends.base`` re-exports it as the backend contract's error (the
    planner trims the history on it); :func:`check_prompt_length` gives all four counts, a remote backend may know
    only the first two.

    Attributes:
        prompt_tokens: length of the prompt.
        limit: the most prompt tokens this call allows: ``max_positions - generation_tokens``.
        max_positions: the model's ``max_position_embeddings`` (``None`` when unknown).
        generation_tokens: the call's generation budget, whole canvases (``None`` when unknown)."""

    def __init__(
        self,
        prompt_tokens: int,
        limit: int,
        max_positions: int | None = None,
        generation_tokens: int | None = None,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.limit = limit
        self.max_positions = max_positions
        self.generation_tokens = generation_tokens
        super().__init__(prompt_too_long_message(prompt_tokens, limit, max_positions, generation_tokens))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.prompt_tokens, self.limit, self.max_positions, self.generation_tokens))


def prompt_too_long_message(
    prompt_tokens: int, limit: int, max_positions: int | None = None, generation_tokens: int | None = None
) -> str:
    """What :class:`PromptTooLong` says: the prompt's length against the limit, or, when the budget alone leaves no
    room, that ``max_new_tokens`` is the one to lower."""
    if max_positions is None or generation_tokens is None:
        return f"the prompt is {prompt_tokens:,} tokens but this model takes at most {max(limit, 0):,}"
    if limit <= 0:
        return (
            f"the generation budget of {generation_tokens:,} tokens (max_new_tokens, rounded up to whole "
            f"canvases) fills this model's {max_positions:,} positions and leaves no room for the "
            f"{prompt_tokens:,}-token prompt; lower max_new_tokens"
        )
    return (
        f"the prompt is {prompt_tokens:,} tokens but this model takes at most {limit:,} "
        f"({max_positions:,} positions minus a generation budget of {generation_tokens:,} tokens)"
    )


def max_positions(model: Any) -> int | None:
    """The model's ``max_position_embeddings``, or ``None`` when its config has none."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if value else None


def generation_tokens(model: Any, settings: Any) -> int:
    """Positions one call reserves: ``max_new_tokens`` rounded up to whole canvases."""
    canvas = int(getattr(model.config, "canvas_length", None) or settings.canvas_length)
    return -(-int(settings.max_new_tokens) // canvas) * canvas


def prompt_token_limit(model: Any, settings: Any) -> int | None:
    """The longest prompt one call with ``settings`` allows (only the model's config is read); ``None`` when
    unbounded."""
    positions = max_positions(model)
    if positions is None:
        return None
    return positions - generation_tokens(model, settings)


def check_prompt_length(prompt_tokens: int, model: Any, settings: Any) -> None:
    """Raise :class:`PromptTooLong` when ``prompt_tokens`` do not fit with the generation budget (reads only the
    model's config)."""
    positions, budget = max_positions(model), generation_tokens(model, settings)
    if positions is not None and prompt_tokens > positions - budget:
        raise PromptTooLong(prompt_tokens, positions - budget, positions, budget)
