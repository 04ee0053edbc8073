"""Local ``$ref`` resolution (JSON pointers, ``$anchor`` and draft-4 ``id`` anchors, the root's ``$id``)
and the inlining of non-recursive references.

Hand-written rather than on the ``referencing`` library (0.37): a tool schema in the wild mixes dialects
without a ``$schema`` (draft-4 ``id: "#name"`` anchors beside 2020-12 ``$anchor``, both under ``$defs``), which
``referencing`` resolves only under one specification at a time: in ``{"$defs": {"a": {"id": "#old"}, "b":
{"$anchor": "new"}}, ...}`` draft 2020-12 finds no ``#old`` and drafts 4/7 find neither (they do not look under
``$defs``). And the inliner needs the *location* of each target (two references to one place are one
definition, named after the place), where ``Resolver.lookup`` returns only its contents
(``tests/test_constraints_schema.py::test_refs_mix_draft4_id_anchors_with_2020_12_anchors_under_defs``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from schema.errors import SchemaError

#: Keywords whose value is one schema.
SCHEMA_KEYS = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains")
#: Keywords whose value is a list of schemas.
SCHEMA_LIST_KEYS = ("allOf", "anyOf", "oneOf", "prefixItems")
#: Keywords whose value maps names to schemas.
SCHEMA_MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


_ANNOTATIONS = {
    "$schema",
    "$id",
    "id",
    "$comment",
    "$anchor",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "optional",
    "discriminator",
    "nullable",
    "$vocabulary",
}


def escape_pointer_token(name: str) -> str:
    """``name`` escaped as one JSON pointer token (``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return name.replace("~", "~0").replace("/", "~1")


def pointer_get(root: Any, pointer: str) -> Any:
    """Resolve a JSON pointer (``/a/b``) in ``root``; raises ``KeyError`` when missing."""
    cur = root
    if pointer in ("", "/"):
        return cur
    for raw in pointer.lstrip("/").split("/"):
        part = unquote(raw.replace("~1", "/").replace("~0", "~"))
        if isinstance(cur, list):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(pointer)
    return cur


class Refs:
    """Resolves local references of one schema document: JSON pointers (``#/a/b``), plain-name anchors
    (``#name`` from ``$anchor`` or a draft-4 ``id: "#name"``) and pointers prefixed with the root's own
    ``$id``/``id``."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.base = ""
        if isinstance(root, dict):
            rid = root.get("$id", root.get("id"))
            if isinstance(rid, str):
                self.base = rid.split("#", 1)[0]
        self.anchors: dict[str, str] = {}
        self._index(root, "")

    def _index(self, node: Any, path: str) -> None:
        if isinstance(node, list):
            for i, x in enumerate(node):
                self._index(x, f"{path}/{i}")
            return
        if not isinstance(node, dict):
            return
        for key in ("$id", "id", "$anchor"):
            v = node.get(key)
            if isinstance(v, str):
                name = v[1:] if v.startswith("#") else (v if key == "$anchor" else "")
                if name and not name.startswith("/"):
                    self.anchors.setdefault(name, path)
        for k, v in node.items():
            if k not in ("enum", "const", "default", "examples") and isinstance(v, (dict, list)):
                self._index(v, f"{path}/{escape_pointer_token(k)}")

    def pointer(self, ref: Any, path: str) -> str:
        """The JSON pointer ``ref`` designates in the root document.

        Raises:
            SchemaError: a remote reference or a dangling one (keyword ``"$ref"``).
        """
        if not isinstance(ref, str):
            raise SchemaError("$ref", path, f"$ref must be a string, got {ref!r}")
        r = ref
        if self.base and r.startswith(self.base):
            r = r[len(self.base) :]
        if not r.startswith("#"):
            raise SchemaError("$ref", path, f"only local references ('#...') are supported, got {ref!r}")
        frag = r[1:]
        if frag and not frag.startswith("/"):
            if frag not in self.anchors:
                raise SchemaError("$ref", path, f"reference {ref!r} does not resolve")
            return self.anchors[frag]
        try:
            pointer_get(self.root, frag)
        except (KeyError, IndexError, ValueError):
            raise SchemaError("$ref", path, f"reference {ref!r} does not resolve") from None
        return frag


class TooLarge(Exception):
    """Inlining would pass :data:`MAX_INLINED_NODES` nodes."""

    pass


#: Inlining stops (and references are kept) beyond this many schema nodes.
MAX_INLINED_NODES = 20_000


def _direct_refs(node: Any, path: str, out: list[str], refs: Refs) -> None:
    """Collect the local ``$ref`` pointers found in ``node`` (not following them, skipping definitions)."""
    if isinstance(node, list):
        for i, x in enumerate(node):
            _direct_refs(x, f"{path}/{i}", out, refs)
        return
    if not isinstance(node, dict):
        return
    for k, v in node.items():
        if k == "$ref":
            out.append(refs.pointer(v, path))
        elif k in SCHEMA_KEYS or k in SCHEMA_LIST_KEYS:
            _direct_refs(v, f"{path}/{k}", out, refs)
        elif k in SCHEMA_MAP_KEYS and k not in ("$defs", "definitions") and isinstance(v, dict):
            for name, sub in v.items():
                _direct_refs(sub, f"{path}/{k}/{escape_pointer_token(name)}", out, refs)


def all_refs(root: Any, refs: Refs) -> set[str]:
    """Every reference target (a pointer) reachable from the document root."""
    out: list[str] = []
    seen: set[str] = set()
    todo = [""]
    while todo:
        ptr = todo.pop()
        if ptr in seen:
            continue
        seen.add(ptr)
        found: list[str] = []
        _direct_refs(pointer_get(root, ptr), ptr, found, refs)
        out.extend(found)
        todo.extend(found)
    return set(out)


def recursive_targets(root: Any, refs: Refs) -> set[str]:
    """Pointers that are targets of back edges in a depth-first walk of the reference graph (cycle breakers).

    Raises:
        SchemaError: a non-local or dangling ``$ref``.
    """
    color: dict[str, int] = {}  # 1 = on the stack, 2 = done
    recursive: set[str] = set()
    stack: list[tuple[str, list[str]]] = []

    def edges(ptr: str) -> list[str]:
        found: list[str] = []
        _direct_refs(pointer_get(root, ptr), ptr, found, refs)
        return found

    color[""] = 1
    stack.append(("", edges("")))
    while stack:
        ptr, todo = stack[-1]
        if not todo:
            color[ptr] = 2
            stack.pop()
            continue
        nxt = todo.pop(0)
        c = color.get(nxt, 0)
        if c == 1:
            recursive.add(nxt)
        elif c == 0:
            color[nxt] = 1
            stack.append((nxt, edges(nxt)))
    return recursive


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


def inline_all(root: Any, keep: set[str], refs: Refs, limit: int | None) -> Any:
    """``root`` with every reference inlined but those to ``keep``; raises :class:`TooLarge` past ``limit`` nodes."""
    names = _def_names(keep)
    count = [0]

    def inline(node: Any) -> Any:
        """Inline references in a schema (a dict or bool; lists only under list keywords)."""
        count[0] += 1
        if limit is not None and count[0] > limit:
            raise TooLarge
        if isinstance(node, list):
            return [inline(x) for x in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        ref_target: Any = None
        ref_at = -1
        for k, v in node.items():
            if k in ("$defs", "definitions"):
                continue
            if k == "$ref":
                ptr = refs.pointer(v, "")
                if ptr in names:
                    out["$ref"] = f"#/$defs/{names[ptr]}"
                else:
                    ref_target = inline(pointer_get(root, ptr))
                    ref_at = len(out)
                continue
            if k in SCHEMA_KEYS or k in SCHEMA_LIST_KEYS:
                out[k] = inline(v)
            elif k in SCHEMA_MAP_KEYS and isinstance(v, dict):
                out[k] = {name: inline(sub) for name, sub in v.items()}
            else:
                out[k] = v
        if ref_target is None:
            return out
        # Keep the reference where it was among its siblings (keyword order fixes property order).
        items = list(out.items())
        notes = {k: v for k, v in items if k in _ANNOTATIONS}
        before = {k: v for k, v in items[:ref_at] if k not in _ANNOTATIONS}
        after = {k: v for k, v in items[ref_at:] if k not in _ANNOTATIONS}
        parts = [p for p in (before, ref_target, after) if p != {}]
        if len(parts) == 1 and not notes:
            return parts[0]
        return {**notes, "allOf": parts}

    if "" in names:
        result: Any = {"$ref": f"#/$defs/{names['']}"}
    else:
        result = inline(root)
    if names and isinstance(result, dict):
        result = {**result, "$defs": {name: inline(pointer_get(root, ptr)) for ptr, name in names.items()}}
    return result
