"""Tool declarations and their JSON Schemas: normalisation, checks at registration, and a compact schema IR.

``normalize_tool`` accepts the declaration shapes met in practice (OpenAI ``{"type": "function", "function":
{...}}``, bare ``{"name", "description", "parameters"}``, Pydantic output with ``$defs``/``$ref``/``anyOf``/
``title``) and returns a :class:`ToolSpec` whose ``parameters`` are plain JSON Schema (titles dropped,
non-recursive ``$ref`` inlined). Benchmark dialects (BFCL's ``dict``/``float`` types) are translated by their
adapters (``evals.bfcl.to_json_schema``).
Every schema is also compiled to the IR below, so an unsupported keyword or an unsatisfiable schema is a
:class:`SchemaError` at registration (naming the keyword and its JSON pointer), never a failure mid-generation.
Compile work is bounded (:data:`MAX_COMPILE_STEPS` here, ``MAX_GRAMMAR_CHARS`` for the grammar text): a schema
past the bound is refused the same way, so registering a tool never hangs.

The IR (the ``Node`` subclasses of :mod:`schema.ir`) is what the grammar compilers of :mod:`grammar` consume:
``allOf`` and sibling keywords are intersected, ``oneOf`` becomes ``anyOf`` when its branches are provably
disjoint, ``enum``/``const`` become literals, patterns are translated from ECMA-262 to llguidance's regex
syntax with JSON Schema's search semantics made explicit. Recursive ``$ref`` cycles stay as :class:`Ref` nodes
(grammar rules). The semantics follow JSON Schema Draft 2020-12 with the same departures as llguidance's JSON
Schema compiler (https://github.com/guidance-ai/llguidance/blob/main/docs/json_schema.md): properties come
in schema order, ``uniqueItems``/``not``/``if``/``contains``/``dependencies``/``propertyNames`` and unknown
string formats are rejected (but for :data:`schema.formats.FREE_FORMATS`, Pydantic's names for any string: ``path``,
``binary``...), integers are written without a fraction.

A leaf package: it imports none of the project's packages (and no torch); :mod:`grammar`, ``model`` and
``agentkit`` import it.
"""

from schema import ir
from schema.algebra import MAX_COMPILE_STEPS
from schema.build import Builder, build_ir, cached_ir
from schema.errors import SchemaError
from schema.formats import FORMAT_LIMITS, FORMATS, format_matches
from schema.ir import MAX_MULTIPLE_OF
from schema.normalize import MAX_NESTING, check_nesting, nesting, normalize_schema
from schema.regex import pattern_matches, pattern_to_regex
from schema.spec import ToolSpec, canonical, fingerprint, normalize_tool

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
    "cached_ir",
    "canonical",
    "check_nesting",
    "fingerprint",
    "format_matches",
    "ir",
    "nesting",
    "normalize_schema",
    "normalize_tool",
    "pattern_matches",
    "pattern_to_regex",
]
