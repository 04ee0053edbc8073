"""Gemma 4 control tokens (the prompt format of the official chat template), the ids of the project's own
vocabularies (the real checkpoint has its own: always look ids up through the tokenizer), and the marking of text
that spells a control token (:func:`mark_text`), so control tokens come only where the template or grammar puts
them.
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


#: Private-use character (U+E000) written after a ``<`` of text so that it reads as no control token.
TEXT_MARK = "\ue000"
_MARKED_LT = "<" + TEXT_MARK
#: The shape of every Gemma control token: ``<``, no whitespace or angle brackets, ``>``. Only control tokens
#: of this shape are read as tokens in a marked string (:func:`model.checkpoint.tokenizer.encode_marked`).
CONTROL_SHAPE = r"<[^<>\s]*>"
#: A ``<`` of text that must be marked: it starts a :data:`CONTROL_SHAPE` span or is followed by the mark.
_NEEDS_MARK = re.compile(rf"<(?=[^<>\s]*>|{TEXT_MARK})")


def mark_text(text: str) -> str:
    """``text`` with :data:`TEXT_MARK` after each ``<`` that starts a :data:`CONTROL_SHAPE` span or precedes the
    mark; other text is unchanged (``a < b``). In marked strings (what :func:`grammar.parse.format_value` writes,
    :func:`model.checkpoint.tokenizer.decode_marked` returns) a control token spelled literally is the token.
    ``unmark_text(mark_text(text)) == text`` for every string."""
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
