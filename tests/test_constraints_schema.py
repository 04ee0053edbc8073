"""Tool declarations and their schemas: normalisation, checks at registration, the schema IR."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Literal

import llguidance
import pytest
from pydantic import BaseModel, DirectoryPath, Field, SecretStr

from grammar.turn import tool_call_grammar
from model.checkpoint.tokenizer import build_tokenizer
from schema import (
    SchemaError,
    ToolSpec,
    build_ir,
    normalize_schema,
    normalize_tool,
    pattern_to_regex,
)
from schema.ir import AnyOf, Lit, Num, Obj, Ref, Str
from schema.refs import Refs


def _walk_keys(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            if k != "properties":
                yield from _walk_keys(v)
            else:
                for sub in v.values():
                    yield from _walk_keys(sub)
    elif isinstance(node, list):
        for x in node:
            yield from _walk_keys(x)


PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


@pytest.mark.parametrize(
    "decl",
    [
        {
            "type": "function",
            "function": {"name": "search", "description": "Find things.", "parameters": PARAMS},
        },
        {"name": "search", "description": "Find things.", "parameters": PARAMS},
    ],
)
def test_normalize_tool_shapes(decl):
    spec = normalize_tool(decl)
    assert spec == ToolSpec("search", "Find things.", PARAMS)
    assert normalize_tool(spec) is spec
    with pytest.raises(AttributeError):
        spec.name = "x"  # type: ignore[misc]


def test_missing_parameters_mean_no_arguments():
    spec = normalize_tool({"name": "now"})
    assert spec.parameters == {"type": "object", "properties": {}}
    assert spec.description == ""


def test_bfcl_types_are_translated_by_the_bfcl_adapter_not_the_normaliser():
    from evals.bfcl import to_json_schema

    decl = {
        "name": "math.hypot",
        "description": "d",
        "parameters": {
            "type": "dict",
            "properties": {
                "x": {"type": "float", "description": "x", "optional": True},
                "pt": {"type": "tuple", "items": {"type": "integer"}},
                "blob": {"type": "any"},
                "cfg": {"type": "dict", "properties": {"w": {"type": "float"}}},
            },
            "required": ["x"],
        },
    }
    with pytest.raises(SchemaError):  # the library speaks JSON Schema only
        normalize_tool(decl)
    p = normalize_tool({**decl, "parameters": to_json_schema(decl["parameters"])}).parameters
    assert p["type"] == "object"
    assert p["properties"]["x"] == {"type": "number", "description": "x"}
    assert p["properties"]["pt"] == {"type": "array", "items": {"type": "integer"}}
    assert p["properties"]["blob"] == {}
    assert p["properties"]["cfg"]["properties"]["w"]["type"] == "number"


class Address(BaseModel):
    street: str
    zip_code: str | None = None


class CreateArgs(BaseModel):
    name: str = Field(title="The name", description="who")
    address: Address
    billing: Address | None = None
    tags: list[str] = []
    mode: Literal["fast", "slow"] = "fast"


class TreeNode(BaseModel):
    label: str
    children: list[TreeNode] = []


class Forest(BaseModel):
    root: TreeNode


def test_pydantic_schema_is_inlined_without_titles():
    raw = CreateArgs.model_json_schema()
    assert "$defs" in raw and "title" in raw
    p = normalize_tool({"name": "create", "parameters": raw}).parameters
    keys = set(_walk_keys(p))
    assert "title" not in keys and "$defs" not in keys and "$ref" not in keys
    assert p["properties"]["address"]["properties"]["street"] == {"type": "string"}
    billing = p["properties"]["billing"]["anyOf"]
    assert {"type": "null"} in billing and any("properties" in b for b in billing)
    assert p["properties"]["name"]["description"] == "who"
    assert p["properties"]["mode"]["enum"] == ["fast", "slow"]
    # the property *named* "title" is kept: only the keyword is dropped
    p2 = normalize_tool(
        {
            "name": "t",
            "parameters": {"type": "object", "properties": {"title": {"type": "string", "title": "T"}}},
        }
    ).parameters
    assert p2["properties"] == {"title": {"type": "string"}}


def test_recursive_pydantic_schema_keeps_rules():
    p = normalize_tool({"name": "tree", "parameters": Forest.model_json_schema()}).parameters
    text = json.dumps(p)
    assert '"$ref": "#/$defs/TreeNode"' in text
    assert set(p["$defs"]) == {"TreeNode"}
    ir = build_ir(p)
    assert isinstance(ir.root, Obj) and isinstance(ir.root.prop("root"), Ref)
    node = ir.defs[ir.root.prop("root").name]
    children = node.prop("children")
    assert children.items == ir.root.prop("root")  # the rule refers to itself


@pytest.mark.parametrize(
    ("params", "keyword", "path"),
    [
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "not", "/properties/a"),
        (
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 3}}},
            "minimum",
            "/properties/n",
        ),
        (
            {
                "type": "object",
                "properties": {"n": {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}},
            },
            "exclusiveMinimum",
            "/properties/n",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1.2, "maximum": 1.8}}},
            "minimum",
            "/properties/n",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "l": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"x": {"type": "array", "minItems": 3, "maxItems": 2}},
                        },
                    }
                },
            },
            "minItems",
            "/properties/l/items/properties/x",
        ),
        (
            {"type": "object", "properties": {"s": {"type": "string", "minLength": 4, "maxLength": 2}}},
            "minLength",
            "/properties/s",
        ),
        ({"type": "object", "properties": {"e": {"enum": []}}}, "enum", "/properties/e"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["b"],
                "additionalProperties": False,
            },
            "required",
            "",
        ),
        (
            {"type": "object", "properties": {"d": {"type": "string", "format": "telephone"}}},
            "format",
            "/properties/d",
        ),
        (
            {"type": "object", "properties": {"p": {"type": "string", "pattern": "^(?!x)"}}},
            "pattern",
            "/properties/p",
        ),
        (
            {"type": "object", "properties": {"p": {"type": "string", "pattern": "(a)\\1"}}},
            "pattern",
            "/properties/p",
        ),
        (
            {"type": "object", "properties": {"r": {"$ref": "https://example.com/s.json"}}},
            "$ref",
            "/properties/r",
        ),
        ({"type": "object", "properties": {"r": {"$ref": "#/$defs/missing"}}}, "$ref", "/properties/r"),
        (
            {
                "type": "object",
                "properties": {"u": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}},
            },
            "oneOf",
            "/properties/u",
        ),
        (
            {"type": "object", "properties": {"u": {"type": "array", "uniqueItems": True}}},
            "uniqueItems",
            "/properties/u",
        ),
        ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}, "if", ""),
        (
            {"type": "object", "properties": {"c": {"type": "array", "contains": {"type": "integer"}}}},
            "contains",
            "/properties/c",
        ),
        ({"type": "object", "properties": {"t": {"type": "strng"}}}, "type", "/properties/t"),
        (
            {"type": "object", "properties": {"m": {"type": "integer", "multipleOf": 0}}},
            "multipleOf",
            "/properties/m",
        ),
        ({"type": "array", "items": {"type": "integer"}}, "type", ""),
        ({"type": "object", "required": ["a", "b"], "maxProperties": 1}, "maxProperties", ""),
    ],
)
def test_unsupported_or_unsatisfiable_schemas_fail_at_registration(params, keyword, path):
    with pytest.raises(SchemaError) as ei:
        normalize_tool({"name": "t", "parameters": params})
    assert (ei.value.keyword, ei.value.path) == (keyword, path)
    assert repr(keyword) in str(ei.value) and (path or "/") in str(ei.value)


def test_a_required_parameter_declared_nowhere_is_refused_naming_tool_and_parameter():
    # JSON Schema allows it, but tool arguments take no undeclared key: the constraint used to force the key
    # with an unconstrained value (the Gemma syntax) that no function or server declared
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city", "country"]}
    with pytest.raises(SchemaError) as ei:
        normalize_tool({"name": "weather", "parameters": params})
    assert (ei.value.keyword, ei.value.path) == ("required", "")
    assert (
        str(ei.value)
        == "tool 'weather': required parameter 'country' is not in properties (keyword 'required' at /)"
    )
    # declared another way, or required by one branch of properties declared beside it: fine
    for ok in (
        {"type": "object", "additionalProperties": {"type": "string"}, "required": ["x"]},
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}, "required": ["xy"]},
        {
            "type": "object",
            "properties": {"v": {"type": "string"}, "w": {"type": "string"}},
            "anyOf": [{"required": ["v"]}, {"required": ["w"]}],
        },
    ):
        assert normalize_tool({"name": "t", "parameters": ok}).parameters == ok


@pytest.mark.parametrize("name", ["", "two words", "f{x}", "a:b", None])
def test_bad_tool_names(name):
    with pytest.raises(SchemaError) as ei:
        normalize_tool({"name": name, "parameters": PARAMS})
    assert ei.value.keyword == "name"


def test_trivial_values_of_unsupported_keywords_are_accepted():
    spec = normalize_tool(
        {
            "name": "t",
            "parameters": {
                "type": "object",
                "properties": {"l": {"type": "array", "uniqueItems": False}},
                "dependencies": {},
            },
        }
    )
    assert spec.parameters["properties"]["l"]["uniqueItems"] is False


def test_ir_intersects_allof_in_keyword_order():
    ir = build_ir(
        {
            "type": "object",
            "allOf": [
                {"properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}, "a": {"maximum": 9}}},
            ],
            "properties": {"c": {"type": "boolean"}},
        }
    )
    root = ir.root
    assert isinstance(root, Obj)
    assert [k for k, _ in root.props] == ["a", "b", "c"]
    assert root.required == ("a",)
    a = root.prop("a")
    assert isinstance(a, Num) and (a.integer, a.minimum, a.maximum) == (True, 0, 9)


def test_ir_oneof_disjoint_through_siblings_and_enum_filtering():
    schema = {
        "type": "object",
        "required": ["kind"],
        "oneOf": [
            {"properties": {"kind": {"const": "a"}}},
            {"properties": {"kind": {"const": "b"}, "x": {"type": "integer"}}},
        ],
        "properties": {"kind": {"type": "string"}},
    }
    root = build_ir(schema).root
    assert isinstance(root, AnyOf) and len(root.options) == 2
    assert root.options[0].prop("kind") == Lit("a", "str")
    e = build_ir({"type": "string", "enum": ["a", 1, "bb", None], "maxLength": 1}).root
    assert e == Lit("a", "str")


def test_ir_refs_anchors_and_ids():
    schema = {
        "id": "http://example.com/root.json#",
        "definitions": {"pos": {"id": "#pos", "type": "integer", "minimum": 0}},
        "type": "object",
        "properties": {"a": {"$ref": "#pos"}, "b": {"$ref": "http://example.com/root.json#/definitions/pos"}},
    }
    root = build_ir(schema).root
    assert root.prop("a") == root.prop("b") == Num(True, 0, None, None, None, None)


def test_refs_mix_draft4_id_anchors_with_2020_12_anchors_under_defs():
    # Why schema/refs.py gives `referencing` a specification of its own: this mix resolves under none of the
    # library's (draft 2020-12 ignores `id: "#old"`, draft 4/7 do not look under `$defs` nor read `$anchor`).
    mixed = {
        "$defs": {"a": {"id": "#old", "type": "string"}, "b": {"$anchor": "new", "type": "integer"}},
        "type": "object",
        "properties": {"x": {"$ref": "#old"}, "y": {"$ref": "#new"}},
    }
    assert normalize_schema(mixed)["properties"] == {
        "x": {"id": "#old", "type": "string"},
        "y": {"$anchor": "new", "type": "integer"},
    }
    # an anchor and a pointer to one place are one recursive definition, named after the place
    linked = {
        "$defs": {"node": {"$anchor": "n", "type": "object", "properties": {"next": {"$ref": "#n"}}}},
        "type": "object",
        "properties": {"head": {"$ref": "#/$defs/node"}},
    }
    out = normalize_schema(linked)
    assert out["properties"] == {"head": {"$ref": "#/$defs/node"}}
    assert out["$defs"]["node"]["properties"] == {"next": {"$ref": "#/$defs/node"}}


def test_refs_key_each_target_by_its_pointer_however_the_reference_spells_it():
    # `referencing` joins a reference with the root's `$id` and unescapes its pointer: a document-relative URI,
    # a percent-encoded token and a plain one name one place, hence one recursive definition
    schema = {
        "$id": "https://example.com/tools/walk.json",
        "$defs": {
            "a node": {"$anchor": "n", "type": "object", "properties": {"next": {"$ref": "walk.json#n"}}}
        },
        "type": "object",
        "properties": {"head": {"$ref": "#/$defs/a%20node"}, "tail": {"$ref": "#/$defs/a node"}},
    }
    out = normalize_schema(schema)
    assert out["properties"] == {"head": {"$ref": "#/$defs/a_node"}, "tail": {"$ref": "#/$defs/a_node"}}
    assert out["$defs"]["a_node"]["properties"] == {"next": {"$ref": "#/$defs/a_node"}}
    refs = Refs(schema)
    assert refs.pointer("#n", "") == refs.pointer("https://example.com/tools/walk.json#/$defs/a node", "")
    assert refs.pointer("#n", "") == "/$defs/a node" and refs.at["/$defs/a node"] is schema["$defs"]["a node"]
    for ref, message in [("#m", "does not resolve"), ("other.json#n", "only local references")]:
        with pytest.raises(SchemaError, match=message) as ei:
            refs.pointer(ref, "/properties/x")
        assert (ei.value.keyword, ei.value.path) == ("$ref", "/properties/x") and repr(ref) in str(ei.value)


def test_ir_draft4_exclusive_bounds_nullable_and_const_objects():
    root = build_ir(
        {
            "type": "object",
            "properties": {
                "x": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                "n": {"type": "string", "nullable": True},
                "c": {"const": {"k": [1, "v"]}},
            },
        }
    ).root
    assert root.prop("x") == Num(False, None, None, 0, None, None)
    assert isinstance(root.prop("n"), AnyOf) and Str() in root.prop("n").options
    c = root.prop("c")
    assert (
        isinstance(c, Obj) and c.required == ("k",) and c.prop("k").prefix == (Lit(1, "int"), Lit("v", "str"))
    )


def test_normalize_schema_does_not_modify_input():
    raw = CreateArgs.model_json_schema()
    before = json.dumps(raw, sort_keys=True)
    normalize_schema(raw)
    assert json.dumps(raw, sort_keys=True) == before


# ---------------------------------------------------------------------------------------------------------
# Patterns: ECMA-262 search semantics, checked against Python's re.search through llguidance
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ll():
    from grammar.llg import llg_tokenizer

    return llg_tokenizer(build_tokenizer(["abc 123 xyz-_./:@ ABC"] * 10, vocab_size=400, min_frequency=1))


PATTERNS = [
    ("abc", ["abc", "xabcx", "ab", ""]),
    ("^a|b$", ["a", "ax", "xb", "xbx", "b"]),
    ("^[\\w.-]+@x\\.com$", ["bob@x.com", "b.o-b@x.com", "bob@y.com", "@x.com"]),
    ("\\d{2,3}", ["12", "x123y", "1", "a"]),
    ("^(abc|xyz)$", ["abc", "xyz", "abcxyz", "ab"]),
    ("(^a.+)|(^[0-9]+)", ["ab", "a", "12", "x12"]),
    ("^([^,]|$)", ["", "a", ",", "a,"]),
    ("^[^/]*/[^/]*$", ["a/b", "a/b/c", "/", "ab"]),
    ("x{2}$", ["axx", "xx", "x", "xxa"]),
    ("^\\/path\\/\\d+$", ["/path/12", "/path/x"]),
    ("^[a-z]{1,3}\\-\\_$", ["ab-_", "abcd-_"]),
]


@pytest.mark.parametrize(("pattern", "texts"), PATTERNS)
def test_pattern_translation_matches_python_search(ll, pattern, texts):
    rx = pattern_to_regex(pattern)
    for text in texts:
        m = llguidance.LLMatcher(ll, llguidance.LLMatcher.grammar_from_lark(f"start: /{rx}/"), log_level=0)
        ids = ll.tokenize_str(text)
        got = m.try_consume_tokens(ids) == len(ids) and m.is_accepting()
        assert got == (re.search(pattern, text, re.ASCII) is not None), (pattern, text, rx)


@pytest.mark.parametrize("pattern", ["(a+)+$(", "a)b", "((a)", "^x(?:y|z$"])
def test_an_unbalanced_parenthesis_is_reported_as_python_re_reports_it(pattern):
    # "(a+)+$(" was reported as "anchor '$' inside pattern ... is not supported", not as the bad regex it is
    with pytest.raises(re.error) as py:
        re.compile(pattern)
    tool = {
        "name": "t",
        "parameters": {"type": "object", "properties": {"p": {"type": "string", "pattern": pattern}}},
    }
    with pytest.raises(SchemaError) as info:
        tool_call_grammar([tool])
    assert str(info.value) == (
        f"pattern {pattern!r} is not a valid regular expression: {py.value} (keyword 'pattern' at /properties/p)"
    )


def test_format_regexes_accept_and_reject():
    from schema import FORMATS

    cases = {
        "date": (["2024-02-29", "1999-12-31"], ["2024-02-30", "2024-13-01", "24-01-01"]),
        "date-time": (
            ["2024-05-01T12:30:00Z", "2024-05-01t12:30:00.5+02:00"],
            ["2024-05-01 12:30:00Z", "2024-05-01T25:00:00Z"],
        ),
        "time": (["23:59:60Z", "00:00:00-01:30"], ["24:00:00Z", "12:00"]),
        "duration": (["P1Y2M3D", "PT5M", "P3W", "P1DT2H"], ["P", "PT", "1Y"]),
        "email": (["bob@example.com", "a.b+c@x.io", "u@[1.2.3.4]"], ["bob", "a..b@x.com", "@x.com"]),
        "hostname": (["example.com", "a-b.c"], ["-a.com", "a_b.com"]),
        "ipv4": (["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "1.2.3"]),
        "ipv6": (["::1", "2001:db8::8a2e:370:7334", "::ffff:1.2.3.4"], ["1:2:3", "::g"]),
        "uuid": (["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
        "uri": (
            ["https://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:a@b.c"],
            ["example.com/a", "1http://x", "http://a b"],
        ),
    }
    assert set(cases) == set(FORMATS)
    for name, (good, bad) in cases.items():
        for s in good:
            assert re.fullmatch(FORMATS[name], s), (name, s)
        for s in bad:
            assert not re.fullmatch(FORMATS[name], s), (name, s)


def test_pydantic_formats_of_any_string_compile_as_free_strings():
    # pathlib.Path parameters (format "path"), FilePath, DirectoryPath, bytes, SecretStr: a tool with one was
    # refused by the embedded backend ("string format 'path' is not supported"), though any string is one
    class Args(BaseModel):
        target: pathlib.Path
        folder: DirectoryPath | None = None
        data: bytes = b""
        token: SecretStr | None = None

    schema = Args.model_json_schema()
    formats = sorted(d["format"] for d in _dicts(schema) if "format" in d)
    assert formats == ["binary", "directory-path", "password", "path"]
    for fmt in ("path", "file-path", "directory-path", "new-path", "binary", "password"):
        assert build_ir({"type": "string", "format": fmt, "maxLength": 9}).root == Str(0, 9, (), (), False)
    build_ir(schema)  # no SchemaError
    with pytest.raises(SchemaError, match="format must be a string"):
        build_ir({"type": "string", "format": ["path"]})


def test_a_schema_nested_too_deeply_is_a_schema_error_not_a_recursion_error():
    # 300 levels of arrays: normalize_tool, build_ir and the grammar raised RecursionError; an agent defining such
    # a tool (parameters=, an MCP server's schema) crashed instead of naming the problem
    deep: dict = {"type": "string"}
    for _ in range(300):
        deep = {"type": "array", "items": deep}
    tool = {"name": "t", "parameters": {"type": "object", "properties": {"a": deep}}}
    for compile_ in (lambda: normalize_tool(tool), lambda: build_ir(deep), lambda: tool_call_grammar([tool])):
        with pytest.raises(
            SchemaError, match=r"nested too deeply: 30[1-3] levels of JSON objects and arr"
        ) as info:
            compile_()
        assert info.value.keyword == "items" and info.value.path.startswith("/")
    shallow: dict = {"type": "string"}
    for _ in range(100):
        shallow = {"type": "array", "items": shallow}
    build_ir(shallow)  # inside the limit


def _dicts(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _dicts(v)
    elif isinstance(node, list):
        for v in node:
            yield from _dicts(v)


def test_date_format_is_a_real_day_as_python_datetime_reads_it():
    # jsonschema's FormatChecker and pydantic parse dates with datetime: year 0 and Feb 29 of a common year fail.
    import datetime

    from schema import FORMATS

    rx = re.compile(FORMATS["date"])
    rx_dt = re.compile(FORMATS["date-time"])
    for year in range(10000):
        for month, day in ((2, 28), (2, 29), (2, 30), (1, 31), (4, 31), (12, 31)):
            text = f"{year:04d}-{month:02d}-{day:02d}"
            try:
                datetime.date.fromisoformat(text)
                real = True
            except ValueError:
                real = False
            assert bool(rx.fullmatch(text)) == real, text
            assert bool(rx_dt.fullmatch(text + "T00:00:00Z")) == real, text
    assert (
        not rx.fullmatch("0000-01-20") and not rx.fullmatch("2025-02-29") and not rx.fullmatch("1900-02-29")
    )
    assert rx.fullmatch("2000-02-29") and rx.fullmatch("2024-02-29") and rx.fullmatch("0004-02-29")


def test_contradictions_inside_anyof_branches_only_remove_the_branch():
    schema = {
        "type": "object",
        "properties": {"v": {"anyOf": [{"type": "integer", "minimum": 3, "maximum": 1}, {"type": "string"}]}},
        "anyOf": [{"required": ["v"]}, {"required": ["w"], "additionalProperties": False}],
    }
    root = build_ir(schema).root
    assert isinstance(root, Obj) and root.prop("v") == Str()
    with pytest.raises(SchemaError) as ei:
        build_ir(
            {
                "anyOf": [
                    {"type": "integer", "minimum": 3, "maximum": 1},
                    {"type": "string", "minLength": 2, "maxLength": 1},
                ]
            }
        )
    assert (ei.value.keyword, ei.value.path) == ("minimum", "/anyOf/0")  # the first branch's contradiction


def test_ref_with_siblings_keeps_its_place_in_property_order():
    schema = {
        "definitions": {
            "base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
        },
        "type": "object",
        "$ref": "#/definitions/base",
        "properties": {"name": {"type": "string"}},
    }
    p = normalize_tool({"name": "t", "parameters": schema}).parameters
    assert [k for k, _ in build_ir(p).root.props] == ["id", "name"]
