"""llguidance tokenizers for Hugging Face tokenizers, built once per tokenizer object and cached (building one
costs 12 ms for a 2k vocabulary, 1.4 s for 262k), parser limits, grammar checks and matchers (``llguidance.hf``,
which imports transformers, only when a tokenizer is built)."""

from __future__ import annotations

import functools
from typing import Any

import llguidance


@functools.lru_cache(maxsize=16)
def llg_tokenizer(hf_tokenizer: Any) -> Any:
    """The ``llguidance.LLTokenizer`` of a fast Hugging Face tokenizer (``llguidance.hf.from_tokenizer``; control
    tokens such as ``<|"|>`` must be added tokens so grammars can name them), cached for 16 tokenizer objects.

    Raises:
        ValueError: ``hf_tokenizer`` is not a fast tokenizer (llguidance needs the Rust tokenizer JSON).
    """
    import llguidance.hf

    return llguidance.hf.from_tokenizer(hf_tokenizer)


#: ``initial_lexer_fuel`` for tool-call grammars: 10x llguidance's default, which objects with many string
#: properties combining a length bound and a pattern exhausted, leaving the matcher in an error state mid-call.
INITIAL_LEXER_FUEL = 10_000_000


def parser_limits() -> Any:
    """``llguidance.LLParserLimits`` for tool-call grammars (:data:`INITIAL_LEXER_FUEL`, other limits default)."""
    return llguidance.LLParserLimits(initial_lexer_fuel=INITIAL_LEXER_FUEL)


def grammar_error(grammar: str, *, limited: bool = True) -> str:
    """llguidance's error text for ``grammar`` ("" when it compiles), under :func:`parser_limits` when
    ``limited`` (else llguidance's default limits)."""
    limits = parser_limits() if limited else None
    return str(llguidance.LLMatcher.validate_grammar(grammar, limits=limits) or "")


def new_matcher(hf_tokenizer: Any, grammar: str) -> Any:
    """A fresh ``llguidance.LLMatcher`` for ``grammar`` (e.g. from :func:`grammar.turn.tool_call_grammar`) over
    ``hf_tokenizer`` with :func:`parser_limits`, in its initial state.

    Raises:
        ValueError: llguidance rejects the grammar (its first error line).
    """
    m = llguidance.LLMatcher(llg_tokenizer(hf_tokenizer), grammar, log_level=0, limits=parser_limits())
    if m.is_error():
        raise ValueError(f"tool grammar does not compile: {m.get_error().strip().splitlines()[0][:300]}")
    return m
