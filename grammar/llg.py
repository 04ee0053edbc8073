"""llguidance tokenizers for Hugging Face tokenizers, built once per tokenizer object and cached.

Building an ``llguidance.LLTokenizer`` costs 12 ms (2k vocabulary) to 1.4 s (262k): never rebuild it per call.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=16)
def llg_tokenizer(hf_tokenizer: Any) -> Any:
    """The ``llguidance.LLTokenizer`` for ``hf_tokenizer`` (cached per tokenizer object).

    Args:
        hf_tokenizer: a ``transformers.PreTrainedTokenizerFast`` (control tokens such as ``<|"|>`` must be
            registered as added tokens so grammars can name them).

    Returns:
        ``llguidance.LLTokenizer`` built with ``llguidance.hf.from_tokenizer`` (EOS = the tokenizer's). At most
        16 tokenizers are kept (``functools.lru_cache``; a tokenizer object is its own key).

    Raises:
        ValueError: ``hf_tokenizer`` is not a fast tokenizer (llguidance needs the Rust tokenizer JSON).
    """
    import llguidance.hf

    return llguidance.hf.from_tokenizer(hf_tokenizer)


#: ``initial_lexer_fuel`` for tool-call grammars: 10x llguidance's default (1M). Objects with many string
#: properties that combine a length bound and a pattern (``^(?:\S+\s+){0,49}\S+$`` with ``maxLength: 500``)
#: exhausted the default while building their regexes, leaving the matcher in an error state mid-call.
INITIAL_LEXER_FUEL = 10_000_000


def parser_limits() -> Any:
    """``llguidance.LLParserLimits`` for tool-call grammars (:data:`INITIAL_LEXER_FUEL`, other limits default)."""
    import llguidance

    return llguidance.LLParserLimits(initial_lexer_fuel=INITIAL_LEXER_FUEL)


def new_matcher(hf_tokenizer: Any, grammar: str) -> Any:
    """A fresh ``llguidance.LLMatcher`` for ``grammar`` with :func:`parser_limits`, checked for errors.

    Args:
        hf_tokenizer: the checkpoint's tokenizer (its ``LLTokenizer`` comes from :func:`llg_tokenizer`).
        grammar: grammar text, e.g. from :func:`grammar.turn.tool_call_grammar`.

    Returns:
        ``llguidance.LLMatcher`` in its initial state (about 1 ms to build for a tool grammar).

    Raises:
        ValueError: llguidance rejects the grammar (message from ``get_error()``).
    """
    import llguidance

    m = llguidance.LLMatcher(llg_tokenizer(hf_tokenizer), grammar, log_level=0, limits=parser_limits())
    if m.is_error():
        raise ValueError(f"tool grammar does not compile: {m.get_error().strip().splitlines()[0][:300]}")
    return m
