"""Tool declarations and their JSON Schemas: normalisation, checks at registration, and a compact schema IR.

``normalize_tool`` accepts OpenAI, bare and Pydantic-style declarations and returns a :class:`ToolSpec` with plain
JSON Schema parameters (titles dropped, non-recursive ``$ref`` inlined). Every schema is compiled to the IR of
:mod:`schema.ir` (what :mod:`grammar` consumes), so an unsupported keyword, an unsatisfiable schema or one past
the compile bound (:data:`MAX_COMPILE_STEPS`) is a :class:`SchemaError` at registration naming the keyword and its
JSON pointer. Semantics: JSON Schema 2020-12 with llguidance's departures
(https://github.com/guidance-ai/llguidance/blob/main/docs/json_schema.md): properties in schema order;
``uniqueItems``/``not``/``if``/``contains``/``propertyNames`` and unknown formats refused (but
:data:`schema.formats.FREE_FORMATS`); integers without a fraction. Imports no project package and no torch.
"""

from schema import ir
from schema.algebra import MAX_COMPILE_STEPS
from schema.build import Builder, build_ir
from schema.errors import SchemaError
from schema.formats import FORMAT_LIMITS, FORMATS, format_matches, grammar_format_checker
from schema.ir import MAX_MULTIPLE_OF
from schema.normalize import MAX_NESTING, nesting, normalize_schema, too_deep
from schema.regex import pattern_matches, pattern_to_regex
from schema.spec import ToolSpec, fingerprint, normalize_tool, tool_ir

__all__ = [
    "FORMATS",
    "FORMAT_LIMITS",
    "MAX_COMPILE_STEPS",
    "MAX_MULTIPLE_OF",
    "MAX_NESTING",
    "Builder",
    "SchemaError",
    "ToolSpec",
    "build_ir",
    "fingerprint",
    "format_matches",
    "grammar_format_checker",
    "ir",
    "nesting",
    "normalize_schema",
    "normalize_tool",
    "pattern_matches",
    "pattern_to_regex",
    "too_deep",
    "tool_ir",
]
