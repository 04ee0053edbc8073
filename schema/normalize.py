"""Schema clean-up: titles dropped, ``$ref`` inlined."""

from __future__ import annotations

from typing import Any

from schema.errors import SchemaError
from schema.refs import (
    MAX_INLINED_NODES,
    Refs,
    TooLarge,
    escape_pointer_token,
    inline_all,
    map_subschemas_at,
    recursive_targets,
)


def drop_titles(schema: Any) -> Any:
    """A copy of ``schema`` (or a list of schemas) without ``title`` keywords, which only cost prompt tokens;
    properties named ``title`` and ``title`` keys inside data are kept."""
    if isinstance(schema, list):
        return [drop_titles(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    kept = {k: v for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    return map_subschemas_at(kept, lambda sub, _where: drop_titles(sub))


#: Deepest nesting of JSON objects and arrays a schema may have (checked before anything recurses into it).
MAX_NESTING = 128


def nesting(value: Any) -> int:
    """Levels of JSON objects and arrays in ``value`` (0 for a scalar), counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, depth)
            stack.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def too_deep(levels: int) -> str:
    """Why a schema of :func:`nesting` ``levels`` (past :data:`MAX_NESTING`) is refused, saying what is counted."""
    return (
        f"nested too deeply: {levels} levels of JSON objects and arrays, at most {MAX_NESTING} (a schema under "
        "'properties' takes two levels: the mapping and the schema)"
    )


def check_nesting(schema: Any) -> None:
    """Raise :class:`SchemaError` (at the first object or array past the limit, with the keyword holding it)
    when ``schema`` nests objects and arrays deeper than :data:`MAX_NESTING`."""
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(schema, 1, ())]
    while stack:
        v, depth, at = stack.pop()
        if not isinstance(v, dict | list):
            continue
        if depth > MAX_NESTING:
            raise SchemaError(
                at[-1] if at else "type",
                "".join(f"/{escape_pointer_token(k)}" for k in at[:-1]),
                f"the schema is {too_deep(nesting(schema))}",
            )
        pairs = v.items() if isinstance(v, dict) else enumerate(v)
        stack.extend((c, depth + 1, (*at, str(k))) for k, c in pairs)


def normalize_schema(schema: Any) -> Any:
    """A copy of ``schema`` without titles and with local ``$ref`` inlined where not recursive (recursive ones
    become ``{"$ref": "#/$defs/<name>"}``, their targets under the root's ``$defs``).

    Raises:
        SchemaError: a non-local or dangling ``$ref``, or nesting deeper than :data:`MAX_NESTING`.
    """
    check_nesting(schema)
    root = drop_titles(schema)
    refs = Refs(root)
    recursive = recursive_targets(refs)  # resolves every reference reachable from the root, into refs.at
    try:
        return inline_all(recursive, refs, MAX_INLINED_NODES)
    except TooLarge:  # definitions shared along many paths: keep every reference (no larger than the input)
        return inline_all(recursive | (set(refs.at) - {""}), refs, None)
