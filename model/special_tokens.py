"""Gemma 4 control tokens as used by DiffusionGemma checkpoints, and the ids of the project's own vocabulary.

The real checkpoint (``google/diffusiongemma-26B-A4B-it``) has its own ids (for example ``<|"|>`` is 52 and
EOS ids are ``[1, 106, 50]``); code must always look ids up through the tokenizer, never hard-code them.
The constants below fix the layout of the *project's* vocabularies (the embedded default checkpoint and the
small test checkpoints), so the first 18 ids are the same in all of them.

Source of the protocol: Gemma 4 prompt format (tool declarations, tool calls, tool responses, thinking
channel), as rendered by the official chat template.
"""

from __future__ import annotations

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
