"""A bundle file as a document: its YAML read with the line and column of every field, refused whole when it is
not UTF-8, empty, not YAML or expands without bound through aliases; and its problems against the bundle JSON
Schema (``agentkit/schemas/bundle.schema.json``), in a bundle author's words."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from agentkit.errors import BundleError, BundleIssue
from agentkit.tool_schema import leaves, yaml_number_hint

__all__ = [
    "MAX_EXPANDED_NODES",
    "FieldPath",
    "Positions",
    "field_name",
    "leaves",
    "read_yaml",
    "schema",
    "schema_issues",
]

SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "bundle.schema.json"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The bundle JSON Schema (``agentkit/schemas/bundle.schema.json``)."""
    return dict(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


FieldPath = tuple[str | int, ...]


def field_name(path: FieldPath) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class Positions:
    """Line/column of every value and key of a YAML document, by field path."""

    def __init__(self) -> None:
        self.values: dict[FieldPath, tuple[int, int]] = {}
        self.keys: dict[FieldPath, tuple[int, int]] = {}

    def at(self, path: FieldPath, *, key: bool = False) -> tuple[int | None, int | None]:
        """Position of ``path`` (of its key when ``key``), else of its nearest known parent."""
        if key and path in self.keys:
            return self.keys[path]
        p = path
        while True:
            if p in self.values:
                return self.values[p]
            if not p:
                return None, None
            p = p[:-1]


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


#: Most values a bundle may expand to once its YAML aliases are followed (a billion-laughs file is refused
#: before anything walks it).
MAX_EXPANDED_NODES = 100_000


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _expanded_size(node: yaml.Node, sizes: dict[int, float]) -> float:
    """Nodes under ``node`` with every alias expanded (``inf`` for a cycle), each node counted once (``sizes``)."""
    if id(node) not in sizes:
        sizes[id(node)] = math.inf  # while its children are counted: a cycle back to it is infinite
        sizes[id(node)] = 1 + sum(_expanded_size(c, sizes) for c in _children(node))
    return sizes[id(node)]


def _too_big(node: yaml.Node, sizes: dict[int, float]) -> yaml.Node:
    """The innermost value under ``node`` that expands past :data:`MAX_EXPANDED_NODES` (in a cycle: the anchored
    value the alias points back to), for its line."""
    seen: set[int] = set()
    while id(node) not in seen:
        seen.add(id(node))
        big = next((c for c in _children(node) if sizes[id(c)] > MAX_EXPANDED_NODES), None)
        if big is None:
            break
        node = big
    return node


def _walk(
    node: yaml.Node, path: FieldPath, pos: Positions, issues: list[tuple[FieldPath, str, bool]]
) -> None:
    pos.values.setdefault(path, _mark(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            if k.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: keys written after it override, not repeat
                continue
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            kp = (*path, key)
            if key in seen:
                pos.keys[(*kp, "#dup")] = _mark(k)
                issues.append(((*kp, "#dup"), f"duplicate key {key!r} (YAML keeps only the last one)", True))
                continue
            seen.add(key)
            pos.keys[kp] = _mark(k)
            _walk(v, kp, pos, issues)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk(v, (*path, i), pos, issues)


def read_yaml(path: Path, file: str, pos: Positions) -> tuple[Any, list[tuple[FieldPath, str, bool]]]:
    """The parsed document and its duplicate keys ``(path, message, at the key)``; ``pos`` gets every field's
    position. Raises :class:`BundleError` for a file that cannot be read as one YAML document."""
    raw_bytes = path.read_bytes()
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        row = raw_bytes.count(b"\n", 0, exc.start) + 1
        column = exc.start - raw_bytes.rfind(b"\n", 0, exc.start)
        msg = f"not UTF-8: byte 0x{raw_bytes[exc.start]:02x} cannot be decoded (save the file as UTF-8)"
        raise BundleError([BundleIssue(file, row, column, "", msg)]) from None
    loader = yaml.SafeLoader(text)
    sizes: dict[int, float] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            raise BundleError([BundleIssue(file, 1, 1, "", "the file is empty")])
        if (size := _expanded_size(node, sizes)) > MAX_EXPANDED_NODES:
            big = _too_big(node, sizes)
            part = f", {sizes[id(big)]:,.0f} of them from the value here" if big is not node else ""
            msg = (
                "the document expands without end through YAML aliases (an alias inside its own anchor)"
                if math.isinf(size)
                else f"the document expands to {size:,.0f} values through YAML aliases (*name){part}; "
                f"at most {MAX_EXPANDED_NODES:,}"
            )
            raise BundleError([BundleIssue(file, *_mark(big), "", msg)])
        raw: list[tuple[FieldPath, str, bool]] = []
        _walk(node, (), pos, raw)  # as written: constructing it flattens `<<` merges into the mappings
        try:
            data = loader.construct_document(node)
        except ValueError:
            # PyYAML's int() of a number longer than Python reads (sys.get_int_max_str_digits())
            why = f"YAML: a number has more than {sys.get_int_max_str_digits():,} digits, which Python does not read"
            raise BundleError([BundleIssue(file, None, None, "", why)]) from None
    except yaml.MarkedYAMLError as exc:
        mark, opened = exc.problem_mark or exc.context_mark, exc.context_mark
        msg = " ".join(x for x in (exc.context, exc.problem) if x) or str(exc)
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        if opened is not None and mark is not None and opened.line != mark.line and exc.context:
            msg += f" (it began at line {opened.line + 1}, column {opened.column + 1})"  # an unclosed bracket
        raise BundleError([BundleIssue(file, line, col, "", f"YAML syntax: {msg}")]) from None
    except yaml.YAMLError as exc:
        raise BundleError([BundleIssue(file, None, None, "", f"YAML: {exc}")]) from None
    except RecursionError:  # PyYAML composes (and we walk) nested values recursively: ~300 levels end it
        mark = loader.get_mark()
        msg = "lists and mappings nest too deep here for the YAML reader (a few hundred levels)"
        raise BundleError([BundleIssue(file, mark.line + 1, mark.column + 1, "", msg)]) from None
    finally:
        loader.dispose()
    return data, raw


def schema_issues(data: Any, issue: Callable[..., BundleIssue]) -> list[BundleIssue]:
    """Each problem of ``data`` against the bundle JSON Schema, in a bundle author's words."""
    import jsonschema

    out: list[BundleIssue] = []
    for err in jsonschema.Draft202012Validator(schema()).iter_errors(data):
        path: FieldPath = tuple(err.absolute_path)
        got = err.instance
        if err.validator == "required" and isinstance(got, dict):
            missing = [r for r in err.validator_value if r not in got]
            why = err.schema.get("x-messages", {}).get("required", "required field '{field}' is missing")
            out += [issue((*path, r), why.format(field=r), at=path, key=True) for r in missing]
        elif err.validator == "additionalProperties" and isinstance(got, dict):
            allowed = err.schema.get("properties", {})
            why = f"(allowed: {', '.join(sorted(allowed))})"
            out += [
                issue((*path, k), f"unknown field '{k}' {why}", key=True) for k in got if k not in allowed
            ]
        else:
            out.append(issue(path, _schema_message(err), key=err.validator == "not"))  # a field not allowed
    return list(dict.fromkeys(out))  # jsonschema reports a "required" per missing field, each naming them all


#: JSON Schema types in a YAML author's words.
_YAML_TYPES = {"array": "a list", "object": "a mapping", "string": "a string", "integer": "an integer"}


def _schema_message(err: Any) -> str:
    """The message of one ``jsonschema.ValidationError``: the schema's ``x-messages`` for its keyword, filled."""
    got, kinds = err.instance, {"list": "a list", "str": "a string"}
    template = err.schema.get("x-messages", {}).get(err.validator)
    if template is None and err.validator == "type" and got is None:  # `tools:` with nothing after it
        want = err.validator_value if isinstance(err.validator_value, str) else "/".join(err.validator_value)
        return f"the value is empty (YAML reads it as null), expected {_YAML_TYPES.get(want, want)}"
    if template is None:  # a number YAML 1.1 read as text (timeout: 1e3) says how to write it
        return str(err.message) + (yaml_number_hint(got) if err.validator == "type" else "")
    found = " and ".join(k for k in ("python", "http", "sandbox") if isinstance(got, dict) and k in got)
    kind, field = kinds.get(type(got).__name__, type(got).__name__), (list(err.absolute_path) or [""])[-1]
    return str(template.format(got=got, kind=kind, found=found or "none", field=field))
