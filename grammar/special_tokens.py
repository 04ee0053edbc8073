"""Gemma 4 control tokens as used by DiffusionGemma checkpoints, and the ids of the project's own vocabulary.

The real checkpoint (``google/diffusiongemma-26B-A4B-it``) has its own ids (for example ``<|"|>`` is 52 and
EOS ids are ``[1, 106, 50]``); code must always look ids up through the tokenizer, never hard-code them.
The constants below fix the layout of the *project's* vocabularies (the embedded default checkpoint and the
small test checkpoints), so the first 18 ids are the same in all of them.

Text that spells a control token is kept apart from the token itself by *marking* it (:func:`mark_text`):
control tokens are produced only where the chat template or the grammar places them.

Source of the protocol: Gemma 4 prompt format (tool declarations, tool calls, tool responses, thinking
channel), as rendered by the official chat template.
"""

from __future__ import annotations

import re

PAD = "<pad>"
EOS = "<eos>"
BOS = "<bos>"
UNK = "<unk>"
TURN_START = "<|turn>"
TURN_END = "<turn|>"
TOOL_START = "<|tool>"
TOOL_END = "<tool|>"
TOOL_CALL_START = "<|tool_call>"
TOOL_CALL_END = "<tool_call|>"
TOOL_RESPONSE_START = "<|tool_response>"
TOOL_RESPONSE_END = "<tool_response|>"
STRING_DELIM = '<|"|>'
CHANNEL_START = "<|channel>"
CHANNEL_END = "<channel|>"
IMAGE_START = "<|image>"
IMAGE_END = "<image|>"
IMAGE_TOKEN = "<|image|>"

#: Special tokens in id order for the project's own vocabularies (id = index).
SPECIAL_TOKENS: tuple[str, ...] = (
    PAD,
    EOS,
    BOS,
    UNK,
    TURN_START,
    TURN_END,
    TOOL_START,
    TOOL_END,
    TOOL_CALL_START,
    TOOL_CALL_END,
    TOOL_RESPONSE_START,
    TOOL_RESPONSE_END,
    STRING_DELIM,
    CHANNEL_START,
    CHANNEL_END,
    IMAGE_START,
    IMAGE_END,
    IMAGE_TOKEN,
)
SPECIAL_IDS: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}

PAD_ID = SPECIAL_IDS[PAD]
EOS_ID = SPECIAL_IDS[EOS]
BOS_ID = SPECIAL_IDS[BOS]
#: End-of-generation ids of the project's checkpoints, mirroring the real checkpoint's ``[<eos>, <turn|>,
#: <|tool_response>]``: generation stops at the end of a turn or where a tool response is due.
GENERATION_EOS_IDS: tuple[int, ...] = (EOS_ID, SPECIAL_IDS[TURN_END], SPECIAL_IDS[TOOL_RESPONSE_START])


# ----------------------------------------------------------------------------------------------------------
# Marked text: text that spells a control token, told apart from the token itself inside one string
# ----------------------------------------------------------------------------------------------------------

#: Private-use character (U+E000) written after a ``<`` that belongs to text, so that text spelling a
#: control token (``<turn|>``, ``<|"|>``...) no longer reads as that token: ``<\ue000turn|>``.
TEXT_MARK = "\ue000"
_MARKED_LT = "<" + TEXT_MARK
#: The shape of every Gemma control token: ``<``, no whitespace or angle brackets, ``>``. Only control tokens
#: of this shape are read as tokens in a marked string (:func:`model.checkpoint.tokenizer.encode_marked`).
CONTROL_SHAPE = r"<[^<>\s]*>"
#: A ``<`` of text that must be marked: it starts a span of :data:`CONTROL_SHAPE`, or is followed by the mark
#: itself (so that :func:`unmark_text` restores such text exactly).
_NEEDS_MARK = re.compile(rf"<(?=[^<>\s]*>|{TEXT_MARK})")


def mark_text(text: str) -> str:
    """Mark ``text`` so that none of its characters reads as a control token in a marked string.

    Every ``<`` that starts a ``<...>`` span without whitespace (:data:`CONTROL_SHAPE`, the shape of every
    control token) or that is followed by :data:`TEXT_MARK` gets :data:`TEXT_MARK` written after it; any other
    text comes back unchanged, so ordinary text (``a < b and c > d``, ``x -> y``) reads the same marked or
    not.

    Marked strings are what :func:`grammar.parse.format_value` writes and
    :func:`model.checkpoint.tokenizer.decode_marked` returns: in them a control token spelled literally is the token,
    and :func:`model.checkpoint.tokenizer.encode_marked` encodes marked text as ordinary text tokens.

    Args:
        text: any text (from a user, a tool, a file or a tool argument).

    Returns:
        The marked text; ``unmark_text(mark_text(text)) == text`` for every string.
    """
    if "<" not in text:
        return text
    return _NEEDS_MARK.sub(_MARKED_LT, text)


def mark_all_text(text: str) -> str:
    """Like :func:`mark_text` but marks every ``<``; the order of strings is kept (``a < b`` iff
    ``mark_all_text(a) < mark_all_text(b)``), so a template that sorts keys sorts them as it would the text."""
    return text.replace("<", _MARKED_LT)


def unmark_text(text: str) -> str:
    """Inverse of :func:`mark_text` and :func:`mark_all_text`: drop the :data:`TEXT_MARK` after each ``<``."""
    return text.replace(_MARKED_LT, "<") if TEXT_MARK in text else text
