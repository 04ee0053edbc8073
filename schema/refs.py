"""Local ``$ref`` resolution (by ``referencing``) and the inlining of non-recursive references.

Tool schemas mix dialects without a ``$schema`` (draft-4 ``id: "#name"`` beside 2020-12 ``$anchor``), which none of
``referencing``'s specifications resolves, so it runs under ours, :data:`TOOL_SCHEMA`: plain-name anchors anywhere
but in data, nested ``$id``s start no resource. Its contents are :class:`Located` values, so each lookup returns
its target's JSON pointer (two references to one place are one definition, named after the place).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urldefrag, urljoin

from referencing import Anchor, Registry, Specification
from referencing.exceptions import Unresolvable

from schema.errors import SchemaError

#: Keywords whose value is one schema.
SCHEMA_KEYS = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains")
#: Keywords whose value is a list of schemas.
SCHEMA_LIST_KEYS = ("allOf", "anyOf", "oneOf", "prefixItems")
#: Keywords whose value maps names to schemas.
SCHEMA_MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

#: Keywords that only annotate: kept beside an inlined ``$ref`` rather than intersected with its target.
_ANNOTATIONS = frozenset(
    "$schema $id id $comment $anchor $defs definitions title description default examples readOnly writeOnly "
    "deprecated contentMediaType contentEncoding contentSchema optional discriminator nullable $vocabulary".split()
)


def escape_pointer_token(name: str) -> str:
    """``name`` escaped as one JSON pointer token (``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return name.replace("~", "~0").replace("/", "~1")


def unescape_pointer_token(token: str) -> str:
    """The name one JSON pointer token stands for (``~1`` -> ``/``, ``~0`` -> ``~``)."""
    return token.replace("~1", "/").replace("~0", "~")


@dataclass(frozen=True)
class Located:
    """A value of the schema document with its JSON pointer (``""``: the root)."""

    pointer: str
    value: Any

    def __getitem__(self, token: str) -> Located:
        """The child at one (unescaped) pointer token; raises ``KeyError`` when there is none."""
        try:
            child = self.value[int(token)] if isinstance(self.value, list) else self.value[token]
        except (ValueError, TypeError, IndexError):
            raise KeyError(token) from None
        return Located(f"{self.pointer}/{escape_pointer_token(token)}", child)


def _inside(node: Located) -> Iterator[Located]:
    """The objects and arrays directly in ``node`` but data (``enum``, ``const``...): where anchors are looked for."""
    v = node.value
    if isinstance(v, dict):
        tokens = [k for k in v if k not in ("enum", "const", "default", "examples")]
    else:
        tokens = [str(i) for i in range(len(v))] if isinstance(v, list) else []
    return (c for c in map(node.__getitem__, tokens) if isinstance(c.value, (dict, list)))


def _anchors(spec: Specification[Located], node: Located) -> Iterator[Anchor[Located]]:
    """The plain-name anchors ``node`` defines: ``$anchor: "name"`` and draft 4-7 ``id``/``$id: "#name"``."""
    for key in ("$id", "id", "$anchor"):
        name = node.value.get(key) if isinstance(node.value, dict) else None
        if isinstance(name, str) and (key == "$anchor" or name.startswith("#")):
            if (name := name.removeprefix("#"))[:1] not in ("", "/"):
                yield Anchor(name=name, resource=spec.create_resource(node))  # type: ignore[call-arg]


#: How ``referencing`` reads a tool schema, whatever its dialect (mypy does not read its attrs classes' fields).
TOOL_SCHEMA: Specification[Located] = Specification(  # type: ignore[call-arg]
    name="agentkit-tool-schema",
    id_of=lambda node: None,
    subresources_of=_inside,
    anchors_in=_anchors,
    maybe_in_subresource=lambda segments, resolver, subresource: resolver,
)


class Refs:
    """Resolves the local references (``#/a/b``, ``#name``, either after the root's ``$id``) of one document."""

    def __init__(self, root: Any) -> None:
        rid = root.get("$id", root.get("id")) if isinstance(root, dict) else None
        self.base = rid.split("#", 1)[0] if isinstance(rid, str) else ""
        resource = TOOL_SCHEMA.create_resource(Located("", root))
        self._resolver = Registry().with_resource(self.base, resource).crawl().resolver(self.base)
        #: The value at each pointer resolved so far, and the root's (``""``).
        self.at: dict[str, Any] = {"": root}
        self._pointers: dict[str, str] = {}

    def pointer(self, ref: Any, path: str) -> str:
        """The JSON pointer ``ref`` designates (its value is then ``self.at[pointer]``); a :class:`SchemaError`
        at ``path`` for a non-string, remote or dangling reference."""
        if not isinstance(ref, str):
            raise SchemaError("$ref", path, f"$ref must be a string, got {ref!r}")
        if ref not in self._pointers:
            if not ref.startswith("#") and urldefrag(urljoin(self.base, ref)).url != self.base:
                raise SchemaError("$ref", path, f"only local references ('#...') are supported, got {ref!r}")
            try:
                found = self._resolver.lookup(ref).contents
            except Unresolvable:
                raise SchemaError("$ref", path, f"reference {ref!r} does not resolve") from None
            self.at[found.pointer] = found.value
            self._pointers[ref] = found.pointer
        return self._pointers[ref]


class TooLarge(Exception):
    """Inlining would pass :data:`MAX_INLINED_NODES` nodes."""


#: Inlining stops (and references are kept) beyond this many schema nodes.
MAX_INLINED_NODES = 20_000


def _direct_refs(node: Any, path: str, refs: Refs) -> Iterator[str]:
    """The local ``$ref`` pointers found in ``node`` (not following them, skipping definitions)."""
    if isinstance(node, list):
        for i, x in enumerate(node):
            yield from _direct_refs(x, f"{path}/{i}", refs)
        return
    for k, v in node.items() if isinstance(node, dict) else ():
        if k == "$ref":
            yield refs.pointer(v, path)
        elif k in SCHEMA_KEYS or k in SCHEMA_LIST_KEYS:
            yield from _direct_refs(v, f"{path}/{k}", refs)
        elif k in SCHEMA_MAP_KEYS and k not in ("$defs", "definitions") and isinstance(v, dict):
            for name, sub in v.items():
                yield from _direct_refs(sub, f"{path}/{k}/{escape_pointer_token(name)}", refs)


def recursive_targets(refs: Refs) -> set[str]:
    """Targets of back edges in a depth-first walk of the reference graph (cycle breakers); the walk resolves
    every reachable reference into ``refs.at``. Raises :class:`SchemaError` for a non-local or dangling one."""
    on_stack = {"": True}  # False once done
    recursive: set[str] = set()
    stack = [("", iter(list(_direct_refs(refs.at[""], "", refs))))]
    while stack:
        ptr, todo = stack[-1]
        nxt = next(todo, None)
        if nxt is None:
            on_stack[ptr] = False
            stack.pop()
        elif on_stack.get(nxt):
            recursive.add(nxt)
        elif nxt not in on_stack:
            on_stack[nxt] = True
            stack.append((nxt, iter(list(_direct_refs(refs.at[nxt], nxt, refs)))))
    return recursive


#: Keywords whose subschemas apply to the value itself, not to one of its properties or items.
_IN_PLACE_KEYS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")


def _ref_alone(refs: Refs) -> bool:
    """Whether the document is drafts 4 to 7, which ignore the keywords beside a ``$ref``."""
    root = refs.at[""]
    return isinstance(root, dict) and "draft-0" in str(root.get("$schema"))


def _in_place_refs(node: Any, refs: Refs) -> Iterator[str]:
    """The pointers of the ``$ref``s that apply to the very value ``node`` applies to."""
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        if "$ref" in n:
            yield refs.pointer(n["$ref"], "")
            if _ref_alone(refs):
                continue
        for k in _IN_PLACE_KEYS:
            v = n.get(k)
            if k == "dependentSchemas" and isinstance(v, dict):
                stack.extend(v.values())
            else:
                stack.extend(v if isinstance(v, list) else [v])


def in_place_loop(refs: Refs, starts: list[str]) -> list[str] | None:
    """A chain of pointers ``[p, ..., p]`` along which references lead from ``p`` back to ``p`` without reaching
    a property or an item (``A: {$ref: B}``, ``B: {anyOf: [{$ref: A}]}``): checking a value against ``p`` never
    ends (JSON Schema leaves it undefined, jsonschema recurses until ``RecursionError``); ``None`` when no
    reference reached from ``starts`` (resolved pointers) is on one. Raises :class:`SchemaError` as
    :meth:`Refs.pointer`."""
    done: set[str] = set()
    for start in starts:
        if start in done:
            continue
        path, stack = [start], [iter(list(_in_place_refs(refs.at[start], refs)))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                done.add(path.pop())
                stack.pop()
            elif nxt in path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done:
                path.append(nxt)
                stack.append(iter(list(_in_place_refs(refs.at[nxt], refs))))
    return None


#: A reason a subschema has no finite value: ``(kind, detail)`` steps, the last one ``("ref", pointer)``,
#: ``("branches", keyword)`` or ``("false", "")``; before it ``("prop", name)`` or ``("items", min_items)``.
Steps = list[tuple[str, Any]]


def _no_value(node: Any, refs: Refs, known: set[str]) -> Steps | None:
    """Why no finite value matches ``node`` while only the targets in ``known`` are known to have one (``None``
    when it may have one: keywords this does not read never count against it, so it is never wrong to accept)."""
    if node is False:
        return [("false", "")]
    if not isinstance(node, dict) or "enum" in node or "const" in node or node.get("nullable") is True:
        return None
    ref = node.get("$ref")
    if isinstance(ref, str) and (ptr := refs.pointer(ref, "")) not in known:
        return [("ref", ptr)]
    if isinstance(ref, str) and _ref_alone(refs):
        return None
    types = node.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else ["any"]
    if all(t in ("object", "array") for t in types):  # else a scalar needs none of the keywords below
        props, required = node.get("properties"), node.get("required")
        props, required = (
            (props, required) if isinstance(props, dict) and isinstance(required, list) else ({}, [])
        )
        as_obj: Steps | None = None
        for r in required:
            if isinstance(r, str) and r in props and (steps := _no_value(props[r], refs, known)):
                as_obj = [("prop", r), *steps]
                break
        items, low = node.get("prefixItems", node.get("items")), node.get("minItems")
        first = items[0] if isinstance(items, list) and items else items  # draft 4's list form: its first
        as_arr = None
        if isinstance(low, int) and low > 0 and (steps := _no_value(first, refs, known)):
            as_arr = [("items", low), *steps]
        if (as_obj or "object" not in types) and (as_arr or "array" not in types):
            return as_obj or as_arr
    parts = node.get("allOf")
    for part in parts if isinstance(parts, list) else ():
        if steps := _no_value(part, refs, known):
            return steps
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and branches:
            why = [_no_value(b, refs, known) or [] for b in branches]
            if all(why):  # followed into a branch that recurses, if one does
                return [("branches", key), *next((w for w in why if w[-1][0] == "ref"), why[0])]
    return None


def _named(ptr: str) -> str:
    """``a Node`` for ``/$defs/Node``, ``the whole schema`` for ``""``, else the quoted reference."""
    tokens = [unescape_pointer_token(t) for t in ptr.split("/")[1:]]
    if len(tokens) == 2 and tokens[0] in ("$defs", "definitions"):
        return f"{_a(tokens[1])} {tokens[1]}"
    return f"'#{ptr}'" if ptr else "the whole schema"


def _a(word: str) -> str:
    return "an" if word.strip("'\"")[:1].lower() in tuple("aeiou") else "a"


def _explain(steps: Steps, start: str) -> str:
    """``steps`` in words (``needs a 'next' that is again a Node``), ``start`` being the definition they begin at."""
    words = []
    for kind, detail in steps:
        if kind == "prop":
            words.append(f"needs {_a(detail)} {detail!r} that")
        elif kind == "items":
            words.append(f"needs at least {detail} item{'s' * (detail > 1)}, the first of which")
        elif kind == "branches":
            words.append(f"matches one of its {detail} branches, each without a finite value; the first")
        elif kind == "ref":
            words.append(f"is {'again ' * (detail == start)}{_named(detail)}")
    return " ".join(words)


def no_finite_value(refs: Refs) -> tuple[tuple[str | int, ...], str] | None:
    """``(path, why)`` when no finite JSON value matches the root because a definition on its way needs again
    itself (``Node`` requires a ``next`` that is a ``Node``: the least fixpoint of "has a finite value" over the
    references leaves the root out), naming the place where the loop begins; ``None`` when one may exist (any
    other reason, or keywords not read, give ``None``). Call it once every reference resolves."""
    users: dict[str, set[str]] = {"": set()}
    todo = [""]
    while todo:
        at = todo.pop()
        for ptr in _direct_refs(refs.at[at], at, refs):
            if ptr not in users:
                users[ptr] = set()
                todo.append(ptr)
            users[ptr].add(at)
    known: set[str] = set()
    todo = list(users)
    while todo:  # a target is tried again once one it refers to is known to have a value
        at = todo.pop()
        if at not in known and _no_value(refs.at[at], refs, known) is None:
            known.add(at)
            todo.extend(users[at])
    chain = [""]
    while (steps := _no_value(refs.at[chain[-1]], refs, known)) and steps[-1][0] == "ref":
        if steps[-1][1] in chain:
            loop = chain[chain.index(steps[-1][1]) :]
            break
        chain.append(steps[-1][1])
    else:
        return None  # a value exists, or none for a reason other than a loop
    start = loop[0]
    shown = loop if len(loop) <= 3 else [*loop[:2], loop[-1]]  # a long loop: its start and its end
    reasons: list[Steps] = [_no_value(refs.at[p], refs, known) or [] for p in shown]
    parts = [_explain(st, start) for st in reasons]
    why = ", which ".join(parts[:2] + [f"... ({len(loop) - 3:,} more) ..."] * (len(loop) > 3) + parts[2:])
    kind, detail = (reasons[0] or [("", "")])[0]
    fix = {
        "prop": f"make {detail!r} optional or allow null",
        "items": "let the array be empty (minItems: 0)",
        "branches": f"give its {detail} a branch that does not recurse",
    }.get(kind, "give the loop a way out: an optional property, null, or a branch that does not recurse")
    place: list[str | int] = []
    node = refs.at[""]
    for token in start.split("/")[1:]:
        token = unescape_pointer_token(token)
        place.append(int(token) if isinstance(node, list) else token)
        node = node[place[-1]]
    return tuple(place), f"every value of it {why}: no finite value satisfies it ({fix})"


def _def_names(ptrs: set[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    used: set[str] = set()
    for ptr in sorted(ptrs):
        base = re.sub(r"[^A-Za-z0-9_]+", "_", ptr.rsplit("/", 1)[-1]) or "root"
        name, i = base, 1
        while name in used:
            i += 1
            name = f"{base}_{i}"
        used.add(name)
        names[ptr] = name
    return names


def map_subschemas_at(schema: dict[str, Any], f: Any) -> dict[str, Any]:
    """A copy of ``schema`` with ``f(subschema, where)`` applied to each direct subschema, ``where`` being its
    place (``("items",)``, ``("anyOf", 0)``, ``("properties", "name")``); data (``enum``, ``default``) is kept."""
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in SCHEMA_KEYS:
            out[k] = [f(x, (k, i)) for i, x in enumerate(v)] if isinstance(v, list) else f(v, (k,))
        elif k in SCHEMA_LIST_KEYS:
            out[k] = [f(x, (k, i)) for i, x in enumerate(v)] if isinstance(v, list) else v
        elif k in SCHEMA_MAP_KEYS:
            out[k] = {kk: f(vv, (k, kk)) for kk, vv in v.items()} if isinstance(v, dict) else v
        else:
            out[k] = v
    return out


def inline_all(keep: set[str], refs: Refs, limit: int | None) -> Any:
    """The root document with every reference inlined but those to ``keep``; raises :class:`TooLarge` past ``limit``
    nodes (schemas and lists of schemas)."""
    names = _def_names(keep)
    count = [0]

    def inline(node: Any) -> Any:
        count[0] += 1
        if isinstance(node, dict):
            node = {k: v for k, v in node.items() if k not in ("$defs", "definitions")}
            count[0] += sum(
                isinstance(v, list) for k, v in node.items() if k in SCHEMA_KEYS + SCHEMA_LIST_KEYS
            )
        if limit is not None and count[0] > limit:
            raise TooLarge
        if isinstance(node, list):
            return [inline(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = map_subschemas_at(node, lambda sub, _where: inline(sub))
        for k in [k for k, v in out.items() if k in SCHEMA_LIST_KEYS and not isinstance(v, list)]:
            out[k] = inline(out[k])  # not a list (build_ir refuses it, or ignores prefixItems): inlined too
        if "$ref" not in out:
            return out
        ptr = refs.pointer(out["$ref"], "")
        if ptr in names:
            return {**out, "$ref": f"#/$defs/{names[ptr]}"}
        ref_target = inline(refs.at[ptr])
        ref_at = list(out).index("$ref")
        items = [(k, v) for k, v in out.items() if k != "$ref"]
        if ref_target is None:
            return dict(items)
        # Keep the reference where it was among its siblings (keyword order fixes property order).
        notes = {k: v for k, v in items if k in _ANNOTATIONS}
        before = {k: v for k, v in items[:ref_at] if k not in _ANNOTATIONS}
        after = {k: v for k, v in items[ref_at:] if k not in _ANNOTATIONS}
        parts = [p for p in (before, ref_target, after) if p != {}]
        return parts[0] if len(parts) == 1 and not notes else {**notes, "allOf": parts}

    if "" in names:
        result: Any = {"$ref": f"#/$defs/{names['']}"}
    else:
        result = inline(refs.at[""])
    if names and isinstance(result, dict):
        result = {**result, "$defs": {name: inline(refs.at[ptr]) for ptr, name in names.items()}}
    return result
