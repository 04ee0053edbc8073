"""YAML tool bundles: loading, python/http/sandbox tools, and errors that name file, line and field."""

import json
import re
import textwrap
from pathlib import Path

import httpx
import jsonschema
import pytest
from sandbox_fixtures import docker_client, sandbox_image, shared_sandbox  # noqa: F401  (fixtures)

from agentkit import Agent, BundleError, load_bundle
from agentkit.backends.embedded import MAX_NEW_TOKENS, EmbeddedBackend
from agentkit.backends.openai import OpenAIBackend
from agentkit.backends.scripted import ScriptedBackend, call
from agentkit.bundle import schema
from agentkit.errors import ToolDefinitionError
from agentkit.tool_output import INVALID_UTF8_NOTE

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, text, name="bundle.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return p


def one_tool_bundle(tmp_path, parameters, name="bundle.yaml"):
    """A bundle with one sandbox tool ``t`` whose ``parameters:`` block is ``parameters`` (YAML)."""
    block = textwrap.indent(textwrap.dedent(parameters).strip("\n"), "      ")
    head = "agentkit_bundle: 1\nname: x\ntools:\n  - name: t\n    parameters:\n"
    return write(tmp_path, head + block + '\n    sandbox: {code: "print(1)"}\n', name)


@pytest.fixture
def pymod(tools_module):
    """A uniquely named helper module next to the bundle (imported from the bundle's folder)."""
    return tools_module(
        "bundle_tools",
        '''
        from agentkit import tool

        def add(a: int, b: int = 1) -> int:
            """Add two integers.

            Args:
                a: First.
                b: Second.
            """
            return a + b

        def echo(**kwargs):
            return kwargs

        @tool(timeout=3, retries=0)
        def shout(text: str) -> str:
            """Upper-case text."""
            return text.upper()
        ''',
    )


def test_schema_file_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(schema())


def test_python_tools_and_agent_settings(tmp_path, pymod):
    (tmp_path / "script.json").write_text(
        json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": 2}}]}, "3"])
    )
    p = write(
        tmp_path,
        f"""
        agentkit_bundle: 1
        name: calc
        description: A calculator.
        model:
          backend: scripted
          name: script.json
        system_prompt: You calculate.
        agent:
          max_steps: 4
          loop_guard: 5
          tool_choice: required
        tools:
          - name: add
            python: {pymod}:add
          - name: echo
            description: Echo the arguments.
            parameters:
              type: object
              properties: {{x: {{type: integer}}}}
              required: [x]
            python: {pymod}:echo
            timeout: 2.5
          - name: shout
            python: {pymod}:shout
        """,
    )
    b = load_bundle(p)
    assert (b.name, b.description, b.system_prompt) == ("calc", "A calculator.", "You calculate.")
    add_t, echo_t, shout_t = b.tools
    assert add_t.parameters["properties"]["a"] == {"type": "integer", "description": "First."}
    assert add_t.description == "Add two integers."
    assert echo_t.timeout == 2.5 and echo_t.parameters["required"] == ["x"]
    assert (shout_t.timeout, shout_t.retries, shout_t.description) == (3, 0, "Upper-case text.")
    agent = Agent.from_bundle(p)
    assert (agent.max_steps, agent.loop_guard, agent.tool_choice, agent.system_prompt) == (
        4,
        5,
        "required",
        "You calculate.",
    )
    result = agent.run("2+1?")
    assert result.answer == "3" and result.tool_calls[0].content == "3"
    # overrides: a Backend instance and Agent keywords
    agent2 = Agent.from_bundle(p, backend=ScriptedBackend([call("echo", x=5), "done"]), max_steps=2)
    assert agent2.max_steps == 2
    assert agent2.run("echo").tool_calls[0].content == '{"x":5}'


def test_switching_backend_kind_drops_the_bundles_backend_settings(tmp_path, pymod):
    p = write(
        tmp_path,
        f"""
        agentkit_bundle: 1
        name: x
        model: {{backend: openai, name: served, base_url: "http://srv:9/v1", request: {{temperature: 0.1}}, seed: 3}}
        tools: [{{name: add, python: "{pymod}:add"}}]
        """,
    )
    b = load_bundle(p)
    be = b.make_backend()
    assert isinstance(be, OpenAIBackend)
    assert (be.model, be.base_url, be.settings) == (
        "served",
        "http://srv:9/v1",
        {"temperature": 0.1, "seed": 3},
    )
    be2 = b.make_backend(model="other")
    assert (be2.model, be2.base_url) == ("other", "http://srv:9/v1")
    emb = b.make_backend(backend="embedded")
    assert emb.name == "embedded:default" and emb.model_path is None


def http_bundle(tmp_path, tool_yaml):
    head = "agentkit_bundle: 1\nname: web\nmodel: {backend: openai, name: m}\ntools:\n"
    return write(tmp_path, head + textwrap.indent(textwrap.dedent(tool_yaml).lstrip("\n"), "  "))


def test_http_tool_builds_the_request(tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_TOKEN", "t0k")
    seen = []

    def handler(request):
        seen.append(request)
        return httpx.Response(200, json={"hits": [request.url.path]})

    p = http_bundle(
        tmp_path,
        """
        - name: search
          description: Search.
          parameters:
            type: object
            properties:
              repo: {type: string}
              q: {type: string}
              limit: {type: integer}
              exact: {type: boolean}
            required: [repo, q]
          http:
            url: "https://api.example.com/repos/{repo}/search"
            headers: {Authorization: "Bearer ${DEMO_TOKEN}"}
            query: {q: "{q}", n: "{limit}", exact: "{exact}", fixed: "v-{q}"}
            retry_wait: 0
        """,
    )
    b = load_bundle(p, http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    agent = b.make_agent(backend=ScriptedBackend([call("search", repo="a/b c", q="x y", exact=True), "ok"]))
    result = agent.run("find")
    req = seen[0]
    assert req.method == "GET"
    assert req.url.raw_path.decode().startswith("/repos/a%2Fb%20c/search?")
    assert dict(req.url.params) == {"q": "x y", "exact": "true", "fixed": "v-x y"}  # absent limit dropped
    assert req.headers["authorization"] == "Bearer t0k"
    assert json.loads(result.tool_calls[0].content) == {"hits": ["/repos/a/b c/search"]}


def test_http_post_default_body_retries_and_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("MISSING_TOKEN", raising=False)
    responses = [503, 200, 404]
    seen = []

    def handler(request):
        seen.append(request)
        status = responses.pop(0)
        if status == 200:
            return httpx.Response(200, text="created", headers={"content-type": "text/plain"})
        return httpx.Response(status, text=f"status {status}")

    p = http_bundle(
        tmp_path,
        """
        - name: create
          parameters:
            type: object
            properties: {id: {type: integer}, title: {type: string}}
            required: [id]
          http: {method: POST, url: "https://api.example.com/items/{id}", retries: 1, retry_wait: 0}
        - name: secret
          parameters: {type: object, properties: {}}
          http: {url: "https://api.example.com/s", headers: {X-Key: "${MISSING_TOKEN}"}}
        """,
    )
    b = load_bundle(p, http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    script = [call("create", id=7, title="T"), call("create", id=8), call("secret"), "done"]
    result = b.make_agent(backend=ScriptedBackend(script)).run("go")
    first, second, third = result.tool_calls
    assert first.content == "created"
    assert [r.method for r in seen[:2]] == ["POST", "POST"]  # 503 retried
    assert json.loads(seen[0].content) == {"title": "T"}  # arguments not in the URL go to the JSON body
    assert second.error_kind == "exception"
    assert "POST https://api.example.com/items/8: HTTP 404: status 404" in second.error
    assert (
        third.error == "RuntimeError: environment variable MISSING_TOKEN is not set (needed by tool 'secret')"
    )
    assert len(seen) == 3


def test_http_tool_binary_bodies_get_the_invalid_utf8_note_and_204_is_a_success(tmp_path):
    # a binary body came through with U+FFFD and no note; `response: json` made a 204 No Content an error
    def handler(request):
        if request.url.path == "/blob":
            return httpx.Response(200, content=b"PNG\x89\xff\xfe ok", headers={"content-type": "image/png"})
        if request.url.path == "/latin":
            return httpx.Response(
                200, content="café".encode("latin-1"), headers={"content-type": "text/plain; charset=latin-1"}
            )
        return httpx.Response(204)

    p = http_bundle(
        tmp_path,
        """
        - name: blob
          parameters: {type: object, properties: {}}
          http: {url: "https://api.example.com/blob"}
        - name: latin
          parameters: {type: object, properties: {}}
          http: {url: "https://api.example.com/latin"}
        - name: remove
          parameters: {type: object, properties: {}}
          http: {method: DELETE, url: "https://api.example.com/item", response: json}
        - name: touch
          parameters: {type: object, properties: {}}
          http: {method: POST, url: "https://api.example.com/item", response: text}
        """,
    )
    b = load_bundle(p, http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    script = [[call("blob"), call("latin"), call("remove"), call("touch")], "done"]
    blob, latin, remove, touch = b.make_agent(backend=ScriptedBackend(script)).run("go").tool_calls
    assert blob.content == "PNG\ufffd\ufffd\ufffd ok\n" + INVALID_UTF8_NOTE.format(n=3)
    assert latin.content == "café"  # a declared charset is decoded as declared
    assert (remove.error_kind, remove.result, remove.content) == (None, None, "null")
    assert (touch.error_kind, touch.result, touch.content) == (None, "", "")


def test_sandbox_tool_gets_arguments_and_reports_failures(tmp_path):
    class Ex:
        def __init__(self, stdout="", stderr="", exit_code=0, timed_out=False):
            self.stdout, self.stderr, self.exit_code, self.timed_out, self.oom_killed = (
                stdout,
                stderr,
                exit_code,
                timed_out,
                False,
            )

    runs = []

    def runner(code, language, files, timeout):
        runs.append((code, language, files, timeout))
        args = json.loads(files["args.json"])
        if args["n"] < 0:
            return Ex(stderr="Traceback...\nValueError: negative", exit_code=1)
        if args["n"] > 100:
            return Ex(timed_out=True, exit_code=137)
        return Ex(stdout=str(args["n"] ** 2) + "\n")

    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: sb
        tools:
          - name: square
            description: Square a number in the sandbox.
            parameters: {type: object, properties: {n: {type: integer}}, required: [n]}
            sandbox:
              timeout: 3
              code: |
                print(args["n"] ** 2)
        """,
    )
    b = load_bundle(p, sandbox_runner=runner)
    result = b.make_agent(
        backend=ScriptedBackend([[call("square", n=12), call("square", n=-1), call("square", n=1000)], "ok"])
    ).run("?")
    ok, bad, slow = result.tool_calls
    assert ok.content == "144\n"
    assert bad.error == "RuntimeError: sandboxed code exited with code 1: Traceback...\nValueError: negative"
    assert slow.error_kind == "exception" and "timed out after 3 s" in slow.error
    # the three calls ran in parallel, in any order; each got its own arguments file
    assert sorted(r[2]["args.json"] for r in runs) == ['{"n": -1}', '{"n": 1000}', '{"n": 12}']
    code, language, _files, timeout = runs[0]
    assert language == "python" and timeout == 3.0
    assert code.endswith('print(args["n"] ** 2)\n') and "json" in code.split("\n")[0]


@pytest.mark.docker
def test_sandbox_tool_runs_in_docker(tmp_path, shared_sandbox):  # noqa: F811 (fixture)
    from tools import python_exec

    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: sb
        tools:
          - name: stats
            description: Mean of numbers, computed in the sandbox.
            parameters:
              type: object
              properties: {values: {type: array, items: {type: number}}, label: {type: string}}
              required: [values]
            sandbox:
              timeout: 20
              code: |
                import statistics, sys
                if not args["values"]:
                    sys.exit("no values")
                print(args.get("label", ""), statistics.mean(args["values"]))
        """,
    )
    python_exec.set_sandbox(shared_sandbox)  # the default runner uses tools.python_exec's sandbox
    try:
        b = load_bundle(p)
        script = [[call("stats", values=[1, 2, 3, 4], label="moyenne é"), call("stats", values=[])], "done"]
        result = b.make_agent(backend=ScriptedBackend(script)).run("mean?")
    finally:
        python_exec.set_sandbox(None)
    ok, bad = result.tool_calls
    assert ok.content == "moyenne é 2.5\n"
    assert bad.error_kind == "exception"
    assert (
        bad.error.startswith("RuntimeError: sandboxed code exited with code 1") and "no values" in bad.error
    )


ERROR_CASES = [
    (
        """
        agentkit_bundle: 1
        name: x
        model:
          seed: 99999999999999999999999
        tools: []
        """,
        4,
        "model.seed",
        "99999999999999999999999 is greater than the maximum of 9223372036854775807",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            python: mod:fn
            timeout: "soon"
        """,
        6,
        "tools[0].timeout",
        "'soon' is not of type 'number'",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            http:
              method: GET
        """,
        5,
        "tools[0].http.url",
        "required field 'url' is missing",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            python: mod:fn
            colour: red
        """,
        6,
        "tools[0].colour",
        "unknown field 'colour'",
    ),
    (
        """
        agentkit_bundle: 3
        name: x
        tools: []
        """,
        1,
        "agentkit_bundle",
        "unsupported bundle format version 3",
    ),
    (
        """
        agentkit_bundle: "1"
        name: x
        tools: []
        """,
        1,
        "agentkit_bundle",
        "unsupported bundle format version '1'; this agentkit reads version 1 (the number: agentkit_bundle: 1)",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              $defs: {A: {$ref: "#/$defs/B"}, B: {$ref: "#/$defs/A"}}
              properties: {s: {$ref: "#/$defs/A"}}
            sandbox: {code: "print(1)"}
        """,
        7,
        "tools[0].parameters.$defs.A",
        "leads into a loop of references that reaches no property or item",
    ),
    (  # draft-04 lets a $ref be a number: this crashed with a bare SchemaError, no file, line or field
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              $schema: "http://json-schema.org/draft-04/schema#"
              type: object
              properties: {a: {$ref: 5}}
            sandbox: {code: "print(1)"}
        """,
        8,
        "tools[0].parameters.properties.a",
        "$ref must be a string, got 5",
    ),
    (  # agentkit check said ok; a forced call then ran into "found no completion shorter than 4096 tokens"
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              properties: {node: {$ref: "#/$defs/Node"}}
              required: [node]
              $defs:
                Node:
                  type: object
                  properties: {v: {type: integer}, next: {$ref: "#/$defs/Node"}}
                  required: [v, next]
            sandbox: {code: "print(1)"}
        """,
        11,
        "tools[0].parameters.$defs.Node",
        "every value of it needs a 'next' that is again a Node: no finite value satisfies it (make 'next' "
        "optional or allow null)",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            python: not a path
        """,
        5,
        "tools[0].python",
        "expected 'package.module:function'",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            description: no implementation
        """,
        4,
        "tools[0]",
        "exactly one implementation (python, http or sandbox), found none",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        name: y
        tools: []
        """,
        3,
        "name",
        "duplicate key 'name'",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            python: no_such_module_xyz.sub:fn
        """,
        5,
        "tools[0].python",
        "cannot import 'no_such_module_xyz.sub:fn': No module named 'no_such_module_xyz'",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              properties:
                q: {type: strng}
            sandbox: {code: "print(1)"}
        """,
        8,
        "tools[0].parameters.properties.q.type",
        "not a valid JSON Schema",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters: {type: object, properties: {q: {type: string}}}
            http:
              url: "https://x.example/{q}"
        """,
        7,
        "tools[0].http.url",
        "URL placeholder {q} must be a required parameter",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters: {type: object, properties: {q: {type: string}}, required: [q]}
            http:
              url: "https://x.example/{q}/{zz}"
        """,
        7,
        "tools[0].http.url",
        "URL placeholder {zz} names no parameter (have: ['q'])",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters: {type: object, properties: {q: {type: string}}, required: [q]}
            http:
              url: "https://x.example/"
              body: {query: "{q}", page: "{page}"}
        """,
        8,
        "tools[0].http.body.page",
        "placeholder {page} names no parameter",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        model:
          backend: embedded
          base_url: http://localhost:8000/v1
        tools: []
        """,
        5,
        "model.base_url",
        "applies to the openai backend only",
    ),
    (  # each backend's own settings are the JSON Schema's to check, at the setting's key
        """
        agentkit_bundle: 1
        name: x
        model:
          backend: openai
          name: m
          dtype: float32
        tools: []
        """,
        6,
        "model.dtype",
        "'dtype' applies to the embedded backend only (backend is 'openai')",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        model: {backend: scripted, name: s.json,
                seed: 1}
        tools: []
        """,
        4,
        "model.seed",
        "the scripted backend takes no 'seed' setting",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        model:
          backend: openai
        tools: []
        """,
        3,
        "model.name",
        "the openai backend needs model.name",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        agent:
          tool_choice: {name: ghost}
        tools: []
        """,
        4,
        "agent.tool_choice.name",
        "tool_choice names 'ghost', which is not a tool of this bundle",
    ),
    (
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            sandbox: {code: "print(1)"}
        """,
        4,
        "tools[0]",
        "a sandbox tool needs 'parameters'",
    ),
    (
        """
        agentkit_bundle: 1
        name: [unclosed
        tools: []
        """,
        3,
        "",
        "YAML syntax",
    ),
    (  # an unclosed bracket is found on a later line: the error is there and names where the bracket opened
        """
        agentkit_bundle: 1
        name: x
        tools:
          - {name: add, python: "m:add", tags: [a, b
          - {name: sub, python: "m:sub"}
        """,
        5,
        "",
        "but got '{' (it began at line 4, column 40)",
    ),
    (  # valid JSON Schema, but the tool-call constraint cannot enforce it: an error at load, not mid-generation
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              properties:
                tags:
                  type: array
                  items: {type: string}
                  uniqueItems: true
            sandbox: {code: "print(1)"}
        """,
        11,
        "tools[0].parameters.properties.tags.uniqueItems",
        "keyword 'uniqueItems' is not supported",
    ),
    (  # a required parameter not in properties: the constraint forced every call to write it with any value
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              properties:
                q: {type: string}
              required: [q, r]
            sandbox: {code: "print(1)"}
        """,
        9,
        "tools[0].parameters.required",
        "tool 't': required parameter 'r' is not in properties",
    ),
    (  # a misspelt keyword would go unenforced (JSON Schema ignores unknown keys): refused, naming the meant one
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              properties:
                q: {type: string, maxLenght: 3}
            sandbox: {code: "print(1)"}
        """,
        8,
        "tools[0].parameters.properties.q.maxLenght",
        "unknown keyword 'maxLenght': did you mean 'maxLength'?",
    ),
    (  # YAML 1.1 reads 1e30 as a string: the message says how to write the number
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              properties:
                n: {type: number, minimum: 1e30}
            sandbox: {code: "print(1)"}
        """,
        8,
        "tools[0].parameters.properties.n.minimum",
        "'1e30' is not of type 'number' (YAML reads 1e30 as a string: write 1.0e+30)",
    ),
]


@pytest.mark.parametrize(("text", "line", "field", "message"), ERROR_CASES)
def test_errors_name_file_line_and_field(tmp_path, text, line, field, message):
    p = write(tmp_path, text)
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    issues = ei.value.issues
    match = [i for i in issues if i.field == field and message in i.message]
    assert match, f"no issue for {field!r} / {message!r} in:\n{ei.value}"
    assert match[0].line == line
    assert match[0].file == str(p)
    assert f"{p}:{line}:" in str(ei.value)


def test_the_constraint_check_follows_the_backend(tmp_path):
    # The same schema: refused with its line for the embedded backend (above), loaded for a remote server,
    # and refused by the agent (naming the tool) when the bundle is run on the embedded backend after all.
    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: x
        model: {backend: openai, base_url: "http://127.0.0.1:9/v1", name: m}
        tools:
          - name: t
            parameters:
              type: object
              properties:
                tags: {type: array, items: {type: string}, uniqueItems: true}
            sandbox: {code: "print(1)"}
        """,
    )
    b = load_bundle(p)
    assert [t.name for t in b.tools] == ["t"]
    with pytest.raises(ToolDefinitionError, match=r"tool 't': .*keyword 'uniqueItems' is not supported"):
        b.make_agent(backend="embedded")
    # a backend name that names none was taken as "not embedded" and skipped the check silently
    for bad in ("embeded", "Embedded"):
        with pytest.raises(
            ValueError, match=f"unknown backend '{bad}'; choose one of embedded, openai, scripted"
        ):
            load_bundle(p, backend=bad)


def test_a_python_tool_whose_signature_the_constraint_cannot_enforce_has_a_line(tmp_path):
    (tmp_path / "unenforceable_mod.py").write_text(
        "from typing import Annotated\n"
        "from pydantic import Field\n"
        "def big(n: Annotated[int, Field(ge=10**20)]) -> int:\n"
        "    return n\n"
    )
    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: big
            python: unenforceable_mod:big
        """,
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    (issue,) = ei.value.issues
    assert (issue.line, issue.field) == (5, "tools[0].python")
    assert "cannot enforce the parameters of 'unenforceable_mod:big'" in issue.message
    assert "keyword 'minimum'" in issue.message


def test_a_duplicate_tool_name_does_not_hide_that_tools_other_problems(tmp_path):
    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            sandbox: {code: "print(1)"}
            parameters: {type: object}
          - name: t
            sandbox: {code: "print(2)"}
            parameters: {type: object, properties: {n: {type: integr}}}
        """,
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    # the second tool's bad type was not reported until its name was changed
    assert [(i.line, i.field, i.message) for i in ei.value.issues] == [
        (7, "tools[1].name", "duplicate tool name 't' (first at tools[0])"),
        (
            9,
            "tools[1].parameters.properties.n.type",
            "not a valid JSON Schema: 'integr' is not valid under any of the given schemas",
        ),
    ]


def test_all_problems_are_reported_at_once_sorted_by_line(tmp_path):
    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: x
        agent: {max_steps: 0}
        tools:
          - name: t
            python: mod:fn
            retries: -1
        """,
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    assert [(i.line, i.field) for i in ei.value.issues] == [(3, "agent.max_steps"), (7, "tools[0].retries")]


def test_file_that_is_not_utf8_names_the_byte_and_where(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes(b"agentkit_bundle: 1\nname: caf\xe9\ntools: []\n")
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    (issue,) = ei.value.issues
    assert (issue.line, issue.column) == (2, 10)
    assert "not UTF-8: byte 0xe9" in issue.message


def test_alias_expansion_is_refused_before_anything_walks_it(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 8)]
    text = "agentkit_bundle: 1\nname: bomb\nx-data:\n" + "".join(f"  {x}\n" for x in levels) + "tools: []\n"
    sizes = [10]  # a sequence node and its 9 scalars; each level holds 9 of the one before
    for _ in range(7):
        sizes.append(1 + 9 * sizes[-1])
    # + the root mapping, its 4 keys, 2 scalar values, the x-data mapping and its 8 keys, the tools list
    expected = sum(sizes) + 17
    with pytest.raises(BundleError, match=f"expands to {expected:,} values through YAML aliases") as ei:
        load_bundle(write(tmp_path, text))
    (issue,) = ei.value.issues
    # at the innermost value past the bound: a5 (line 9), the first level above 100,000 values
    assert (issue.line, issue.column) == (9, 7)
    assert f"(*name), {sizes[5]:,} of them from the value here; at most 100,000" in issue.message
    with pytest.raises(BundleError, match="expands without end through YAML aliases") as ei:
        load_bundle(write(tmp_path, "agentkit_bundle: 1\nname: loop\ntools: &t [*t]\n"))
    (issue,) = ei.value.issues
    assert (issue.line, issue.column) == (3, 8)  # the anchored value the alias points back into
    assert str(ei.value).splitlines()[1].strip().startswith(f"{tmp_path / 'bundle.yaml'}:3:8: the document")


def test_nesting_past_the_yaml_readers_recursion_is_an_issue_not_a_traceback(tmp_path):
    """5,000 nested `[` (or mappings) ended `agentkit check` and `run` with PyYAML's RecursionError."""
    n = 100_000  # past any recursion limit (scripts/structure.py raises it to 10,000)
    for value in ("[" * n + "]" * n, "{a: " * n + "x" + "}" * n):
        text = f"agentkit_bundle: 1\nname: deep\ntools: []\ndescription: {value}\n"
        with pytest.raises(BundleError, match="nest too deep here for the YAML reader") as ei:
            load_bundle(write(tmp_path, text))
        (issue,) = ei.value.issues
        assert issue.line == 4, issue
    ok = "agentkit_bundle: 1\nname: deep\ndescription: " + "[" * 100 + "]" * 100 + "\ntools: []\n"
    with pytest.raises(BundleError, match="is not of type 'string'"):  # read, then the schema speaks
        load_bundle(write(tmp_path, ok))


def test_empty_file(tmp_path):
    with pytest.raises(BundleError, match="the file is empty"):
        load_bundle(write(tmp_path, "\n"))


def test_documented_example_bundles_load(tmp_path, monkeypatch):
    """Every ```yaml block in docs/BUNDLES.md that starts with agentkit_bundle loads (keeps the doc honest)."""
    doc = (ROOT / "docs" / "BUNDLES.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if b.startswith("agentkit_bundle:")]
    assert blocks
    monkeypatch.syspath_prepend(str(ROOT))
    for i, block in enumerate(blocks):
        p = tmp_path / f"doc{i}.yaml"
        p.write_text(block, encoding="utf-8")
        b = load_bundle(p)
        assert b.tools


def test_a_decorated_python_target_keeps_its_grounded_parameters(tmp_path):
    (tmp_path / "mytools.py").write_text(
        "from agentkit import tool\n\n"
        "@tool(grounded=['x'], timeout=7)\n"
        "def look(x: str, y: str = 'a') -> str:\n"
        "    '''Look.\n\n    Args:\n        x: a name.\n        y: another.\n    '''\n"
        "    return x\n"
    )
    (tmp_path / "b.yaml").write_text(
        "agentkit_bundle: 1\nname: g\ntools:\n  - name: look\n    python: mytools:look\n    grounded: [y]\n"
    )
    b = load_bundle(tmp_path / "b.yaml")
    props = b.tools[0].declaration()["function"]["parameters"]["properties"]
    assert props["x"]["x-grounded"] is True and props["y"]["x-grounded"] is True
    assert b.tools[0].timeout == 7


def test_model_and_agent_sections_are_typed(tmp_path):
    from agentkit.bundle import AgentSection, EmbeddedModel, OpenAIModel

    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: x
        model: {backend: openai, name: m, base_url: "http://127.0.0.1:9/v1", seed: 3, request: {top_p: 0.5}}
        agent: {max_steps: 4, tool_choice: none}
        tools: []
        """,
    )
    b = load_bundle(p)
    assert isinstance(b.model_section, OpenAIModel) and b.model_section.name == "m"
    assert b.model_section.backend_settings(tmp_path) == {
        "base_url": "http://127.0.0.1:9/v1",
        "settings": {"top_p": 0.5, "seed": 3},
    }
    assert AgentSection.model_validate(b.agent_settings).max_steps == 4
    p2 = write(tmp_path, "agentkit_bundle: 1\nname: y\nmodel: {adapter: ad, seed: 1}\ntools: []\n", "b2.yaml")
    section = load_bundle(p2).model_section
    assert isinstance(section, EmbeddedModel)
    assert section.backend_settings(tmp_path) == {"seed": 1, "adapter": str(tmp_path / "ad")}


def test_an_embedded_bundle_can_run_on_a_server_despite_an_unenforceable_schema(tmp_path):
    # The constraint check is the embedded backend's: overriding the backend (--backend openai) skips it.
    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: x
        tools:
          - name: t
            parameters:
              type: object
              properties:
                tags: {type: array, items: {type: string}, uniqueItems: true}
            sandbox: {code: "print(1)"}
        """,
    )
    with pytest.raises(BundleError, match="uniqueItems"):
        load_bundle(p)
    b = load_bundle(p, backend="openai")
    agent = b.make_agent(backend="openai", model="m")
    assert [d["function"]["name"] for d in agent.declarations()] == ["t"]
    (tmp_path / "script.json").write_text('["done"]')
    agent = Agent.from_bundle(p, backend="scripted", model=str(tmp_path / "script.json"))
    assert list(agent.tools) == ["t"]


def test_a_grounding_error_points_at_the_field_as_written(tmp_path):
    p = one_tool_bundle(
        tmp_path,
        """
        type: object
        properties:
          n: {type: integer, grounded: true}
        """,
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    (issue,) = ei.value.issues
    assert issue.field == "tools[0].parameters.properties.n.grounded"


def test_a_tool_level_grounded_list_is_checked_at_load_with_its_line(tmp_path):
    text = """\
        agentkit_bundle: 1
        name: g
        tools:
          - name: web
            parameters: {type: object, properties: {q: {type: string, enum: [a, b]}}, required: [q]}
            grounded: [q]
            http:
              url: "http://127.0.0.1:9/{q}"
        """
    with pytest.raises(BundleError) as ei:
        load_bundle(write(tmp_path, textwrap.dedent(text)))
    (issue,) = ei.value.issues
    assert (issue.field, issue.line) == ("tools[0].grounded", 6)
    assert "cannot also have 'enum'" in issue.message and "'grounded'" in issue.message
    # the same tool on a backend without the constraint loads
    assert [t.name for t in load_bundle(write(tmp_path, textwrap.dedent(text)), backend="openai").tools] == [
        "web"
    ]


def test_every_bad_entry_of_a_grounded_list_is_reported_at_once_each_at_its_entry(tmp_path):
    sandbox = """\
        agentkit_bundle: 1
        name: g
        tools:
          - name: search
            sandbox: {code: "print(1)"}
            grounded: [max_results, nope, query]
            parameters: {type: object, properties: {query: {type: string}, max_results: {type: integer}}}
        """
    with pytest.raises(BundleError) as ei:
        load_bundle(write(tmp_path, textwrap.dedent(sandbox)))
    got = [(i.field, i.line, i.column, i.message) for i in ei.value.issues]
    assert got == [
        (
            "tools[0].grounded[0]",
            6,
            16,
            "tool 'search': grounded parameter 'max_results' must be a string (a span of the conversation)",
        ),
        (
            "tools[0].grounded[1]",
            6,
            29,
            "tool 'search': grounded parameter 'nope' is not one of its parameters "
            "(['max_results', 'query'])",
        ),
    ]
    # a python target's parameters come from its signature: the same, per entry
    (tmp_path / "gtools.py").write_text("def look(x: str, n: int = 1) -> str:\n    return x\n")
    (tmp_path / "p.yaml").write_text(
        "agentkit_bundle: 1\nname: g\ntools:\n  - name: look\n    python: gtools:look\n    grounded: [n, z, x]\n"
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(tmp_path / "p.yaml")
    assert [(i.field, i.message[-40:]) for i in ei.value.issues] == [
        ("tools[0].grounded[0]", "be a string (a span of the conversation)"),
        ("tools[0].grounded[1]", "s not one of its parameters (['n', 'x'])"),
    ]


def test_every_json_schema_error_of_a_tool_is_reported_at_once(tmp_path):
    text = """\
        agentkit_bundle: 1
        name: s
        tools:
          - name: search
            sandbox: {code: "print(1)"}
            parameters:
              type: object
              properties:
                query: {type: strin}
                n: {type: integer, minimum: ten}
              required: query
        """
    with pytest.raises(BundleError) as ei:
        load_bundle(write(tmp_path, textwrap.dedent(text)))
    assert [(i.field, i.line, i.message) for i in ei.value.issues] == [
        (
            "tools[0].parameters.properties.query.type",
            9,
            "not a valid JSON Schema: 'strin' is not valid under any of the given schemas",
        ),
        (
            "tools[0].parameters.properties.n.minimum",
            10,
            "not a valid JSON Schema: 'ten' is not of type 'number'",
        ),
        ("tools[0].parameters.required", 11, "not a valid JSON Schema: 'query' is not of type 'array'"),
    ]


def test_grounded_inside_a_nested_schema_is_converted_too(tmp_path):
    nested = """
        type: object
        properties:
          files: {type: array, items: {type: string, grounded: GOOD}}
          owner: {$ref: "#/$defs/Name"}
          grounded: {type: string}
        $defs:
          Name: {type: string, grounded: GOOD}
        """
    p = one_tool_bundle(tmp_path, nested.replace("GOOD", "true"))
    (t,) = load_bundle(p, backend="scripted").tools
    props = t.parameters["properties"]
    assert props["files"]["items"] == {"type": "string", "x-grounded": True}
    assert t.parameters["$defs"]["Name"] == {"type": "string", "x-grounded": True}
    assert props["grounded"] == {"type": "string"}  # a property *named* grounded is a property
    bad = one_tool_bundle(tmp_path, nested.replace("GOOD", '"yes"', 1).replace("GOOD", "1"), "bad.yaml")
    with pytest.raises(BundleError) as ei:
        load_bundle(bad, backend="scripted")
    fields = [i.field for i in ei.value.issues]  # every bad value, each where it is written
    assert fields == [
        "tools[0].parameters.properties.files.items.grounded",
        "tools[0].parameters.$defs.Name.grounded",
    ]
    assert "grounded must be true or false" in str(ei.value)


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "a list"), ("just text\n", "a string")])
def test_a_document_that_is_not_a_mapping_is_named(tmp_path, text, kind):
    p = tmp_path / "b.yaml"
    p.write_text(text)
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    assert f"a bundle is a YAML mapping (agentkit_bundle:, name:, tools: ...), got {kind}" in str(ei.value)
    assert f"{p}:1:1:" in str(ei.value)


def test_a_property_name_yaml_reads_as_a_boolean_or_number_is_named(tmp_path):
    p = one_tool_bundle(
        tmp_path,
        """
        type: object
        properties:
          off: {type: string}
          "on": {type: string}
        """,
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)  # the embedded backend's check used to crash on the name False
    (issue,) = ei.value.issues
    assert issue.field == "tools[0].parameters.properties"
    assert "the name False is not a string" in issue.message and "quote it" in issue.message


def test_a_bundle_chooses_its_binder_and_the_cli_flag_overrides_it(tmp_path):
    from agentkit.backends.embedded import EmbeddedBackend
    from agentkit.errors import BundleError

    p = write(tmp_path, "agentkit_bundle: 1\nname: y\nmodel: {binding: none}\ntools: []\n")
    b = load_bundle(p)
    backend = b.make_backend()
    assert isinstance(backend, EmbeddedBackend) and backend.binding == "none"
    assert backend.binder == "none"  # named: the checkpoint's default is not consulted
    assert b.make_backend(binding="copy-head").binding == "copy-head"  # --binding copy-head
    assert (
        load_bundle(write(tmp_path, "agentkit_bundle: 1\nname: y\ntools: []\n", "b2.yaml"))
        .make_backend()
        .binding
        == "auto"
    )
    with pytest.raises(ValueError, match="--binding applies to the embedded backend only"):
        b.make_backend("scripted", str(tmp_path / "s.json"), binding="none")
    with pytest.raises(BundleError) as ei:
        load_bundle(
            write(tmp_path, "agentkit_bundle: 1\nname: y\nmodel: {binding: rules}\ntools: []\n", "b3.yaml")
        )
    assert "b3.yaml:3" in str(ei.value) and "binding" in str(ei.value)
    with pytest.raises(ValueError, match="binding must be"):
        EmbeddedBackend(binding="rules")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"seed": "7"}, "seed must be an integer that fits in a signed 64-bit integer, or None; got '7'"),
        ({"seed": 2**64}, "seed must be an integer that fits in a signed 64-bit integer"),
        ({"max_steps": 3, "seed": 1.5}, "got 1.5"),
    ],
)
def test_a_bad_seed_given_to_from_bundle_is_refused_before_any_model_loads(tmp_path, overrides, message):
    p = write(tmp_path, "agentkit_bundle: 1\nname: y\ntools: []\n")
    with pytest.raises(ValueError) as ei:
        Agent.from_bundle(p, **overrides)
    assert message in str(ei.value)


def test_the_embedded_backend_refuses_settings_its_runtime_would_refuse_after_loading(tmp_path):
    with pytest.raises(ValueError, match="threads must be an integer >= 1 or None, got 0"):
        EmbeddedBackend(threads=0)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1 or None, got '64'"):
        EmbeddedBackend(max_new_tokens="64")
    # 99999999 was taken, and refused only at the first turn, as a prompt too long for the budget
    with pytest.raises(ValueError, match=r"max_new_tokens must be at most 131,072 .*, got 99,999,999"):
        EmbeddedBackend(max_new_tokens=99_999_999)
    assert EmbeddedBackend(max_new_tokens=MAX_NEW_TOKENS).max_new_tokens == 131_072
    text = "agentkit_bundle: 1\nname: y\nmodel:\n  max_new_tokens: 99999999\ntools: []\n"
    with pytest.raises(BundleError) as ei:
        load_bundle(write(tmp_path, text))
    (issue,) = ei.value.issues
    assert (issue.line, issue.field) == (4, "model.max_new_tokens")
    assert (
        issue.message
        == "must be at most 131072 tokens (a DiffusionGemma context, prompt included), got 99999999"
    )
    assert schema()["$defs"]["model"]["properties"]["max_new_tokens"]["maximum"] == MAX_NEW_TOKENS
    assert EmbeddedBackend(seed=-(2**63), threads=1, max_new_tokens=8).seed == -(2**63)


def test_an_embedded_checkpoint_folder_is_relative_to_the_bundle(tmp_path, monkeypatch):
    # as model.adapter and a scripted script are: the bundle runs from any working directory
    (tmp_path / "bot" / "ckpt").mkdir(parents=True)
    p = write(tmp_path / "bot", "agentkit_bundle: 1\nname: y\nmodel: {name: ckpt}\ntools: []\n")
    monkeypatch.chdir(tmp_path)
    assert load_bundle(p).make_backend().model_path == str(tmp_path / "bot" / "ckpt")
    assert load_bundle(p).make_backend(model="ckpt").model_path == "ckpt"  # --model: as given
    hub = write(
        tmp_path / "bot", "agentkit_bundle: 1\nname: y\nmodel: {name: org/model}\ntools: []\n", "h.yaml"
    )
    assert load_bundle(hub).make_backend().model_path == "org/model"  # no such folder there: a hub id


def test_model_name_and_adapter_expand_env_like_the_toolsets(tmp_path, monkeypatch):
    # ${VAR} in model.name stayed literal (a folder named "${CKPT_DIR}/ckpt") while the toolsets expanded it
    (tmp_path / "bot" / "ckpt").mkdir(parents=True)
    monkeypatch.setenv("AK_TEST_BOT", str(tmp_path / "bot"))
    text = "agentkit_bundle: 1\nname: y\nmodel: {name: '${AK_TEST_BOT}/ckpt', adapter: '${AK_TEST_BOT}/a'}\ntools: []\n"
    backend = load_bundle(write(tmp_path, text)).make_backend()
    assert (backend.model_path, backend.adapter) == (
        str(tmp_path / "bot" / "ckpt"),
        str(tmp_path / "bot" / "a"),
    )
    openai = (
        "agentkit_bundle: 1\nname: y\nmodel:\n  backend: openai\n  name: ${AK_TEST_MODEL_UNSET}\ntools: []\n"
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(write(tmp_path, openai, "o.yaml"))
    (issue,) = ei.value.issues
    assert (issue.line, issue.field, issue.message) == (
        5,
        "model.name",
        "environment variable AK_TEST_MODEL_UNSET is not set",
    )


def test_two_bundles_each_with_its_own_helpers_module_get_their_own_functions(tmp_path):
    # the second bundle's `python: helpers:f` got the first bundle's helpers.f (sys.modules kept it)
    name = f"helpers_{tmp_path.name}"  # a name no other test imports
    for which in ("one", "two", "one"):
        folder = tmp_path / which
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.py").write_text(f"def f(x: int) -> str:\n    return {which!r}\n")
        text = f"agentkit_bundle: 1\nname: b\nmodel: {{backend: openai, name: m}}\ntools:\n  - {{name: f, python: '{name}:f'}}\n"
        (tool,) = load_bundle(write(folder, text)).tools
        assert tool.function(1) == which


def test_python_tool_parameters_that_do_not_fit_the_function_are_refused_with_a_line(tmp_path, pymod):
    # add(a, b=1): a misspelt property, or a needed parameter left optional, would fail every call
    p = write(
        tmp_path,
        f"""
        agentkit_bundle: 1
        name: x
        tools:
          - name: typo
            python: {pymod}:add
            parameters: {{type: object, properties: {{aa: {{type: integer}}}}, required: [aa]}}
          - name: optional
            python: {pymod}:add
            parameters: {{type: object, properties: {{a: {{type: integer}}}}}}
          - name: fits
            python: {pymod}:add
            parameters: {{type: object, properties: {{a: {{type: integer}}}}, required: [a]}}
          - name: anything
            python: {pymod}:echo
            parameters: {{type: object, properties: {{z: {{type: integer}}}}}}
        """,
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    assert [(i.line, i.field, i.message) for i in ei.value.issues] == [
        (
            4,
            "tools[0]",
            "tool 'typo': parameters declares 'aa', which add() does not take (its parameters: a, b)",
        ),
        (
            7,
            "tools[1]",
            "tool 'optional': add() needs 'a', which parameters does not list in 'required' (or give it a default "
            "in the function)",
        ),
    ]


def test_tool_choice_required_without_any_tool_is_a_bundle_error(tmp_path):
    p = write(tmp_path, "agentkit_bundle: 1\nname: x\nagent: {tool_choice: required}\ntools: []\n")
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    assert [(i.line, i.field, i.message) for i in ei.value.issues] == [
        (3, "agent.tool_choice", "tool_choice 'required' needs a tool, and this bundle has none")
    ]


def test_a_python_target_whose_module_fails_to_import_is_a_bundle_error(tmp_path):
    # a syntax error, an exception or sys.exit() while the module is imported was a traceback (or a silent exit)
    (tmp_path / "syntax_broken_mod.py").write_text("def f(:\n    pass\n")
    (tmp_path / "raising_mod.py").write_text("raise RuntimeError('no config found')\n")
    (tmp_path / "exiting_mod.py").write_text("import sys\nsys.exit(3)\n")
    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: x
        tools:
          - {name: a, python: "syntax_broken_mod:f"}
          - {name: b, python: "raising_mod:f"}
          - {name: c, python: "exiting_mod:f"}
        """,
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    assert [(i.line, i.field, i.message) for i in ei.value.issues] == [
        (
            4,
            "tools[0].python",
            f"cannot import 'syntax_broken_mod:f': {tmp_path / 'syntax_broken_mod.py'}:1: SyntaxError: invalid syntax",
        ),
        (
            5,
            "tools[1].python",
            "cannot import 'raising_mod:f': importing it raised RuntimeError: no config found",
        ),
        (6, "tools[2].python", "cannot import 'exiting_mod:f': importing it called sys.exit(3)"),
    ]


def test_yaml_merge_keys_may_be_overridden_and_true_duplicates_are_still_found(tmp_path, pymod):
    # `<<: *base` then `name:` overrides the merged name (YAML's merge rule), it is no duplicate key
    text = f"""
        agentkit_bundle: 1
        name: x
        tools:
          - &base {{name: add, python: "{pymod}:add", timeout: 5}}
          - <<: *base
            name: add_again
        """
    b = load_bundle(write(tmp_path, text))
    assert [(t.name, t.timeout) for t in b.tools] == [("add", 5), ("add_again", 5)]
    dup = text.replace("name: add_again", "name: add_again\n            name: twice")
    with pytest.raises(BundleError) as ei:
        load_bundle(write(tmp_path, dup, "dup.yaml"))
    assert [(i.line, i.field, i.message) for i in ei.value.issues] == [
        (7, "tools[1].name", "duplicate key 'name' (YAML keeps only the last one)")
    ]


def test_a_setting_yaml_read_as_text_says_how_to_write_the_number(tmp_path, pymod):
    # YAML 1.1 reads 1e3 as the string '1e3'; the hint was given inside `parameters` only
    p = write(
        tmp_path,
        f"agentkit_bundle: 1\nname: x\ntools:\n  - {{name: a, python: '{pymod}:add', timeout: 1e3}}\n",
    )
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    assert [(i.field, i.message) for i in ei.value.issues] == [
        ("tools[0].timeout", "'1e3' is not of type 'number' (YAML reads 1e3 as a string: write 1.0e+3)")
    ]


def test_nan_and_infinity_in_a_bundle_are_named_where_they_are(tmp_path):
    # model.request's .nan was sent as NaN (not JSON); a timeout of .inf was taken
    p = tmp_path / "b.yaml"
    p.write_text(
        "agentkit_bundle: 1\nname: x\nmodel:\n  backend: openai\n  name: m\n  timeout: .inf\n"
        "  request: {temperature: .nan, top_p: -.inf}\ntools: []\n"
    )
    with pytest.raises(BundleError) as info:
        load_bundle(p)
    assert [str(i) for i in info.value.issues] == [
        f"{p}:6:12: model.timeout: must be a finite number, got inf",
        f"{p}:7:26: model.request.temperature: must be a finite number, got nan",
        f"{p}:7:39: model.request.top_p: must be a finite number, got -inf",
    ]


def test_each_missing_required_field_is_reported_once(tmp_path):
    """jsonschema yields one "required" error per missing field, each listing every required field: two
    missing fields were reported twice each."""
    p = write(tmp_path, "description: only this\n")
    with pytest.raises(BundleError) as exc:
        load_bundle(p)
    assert [(i.line, i.field, i.message) for i in exc.value.issues] == [
        (1, "agentkit_bundle", "required field 'agentkit_bundle' is missing"),
        (1, "name", "required field 'name' is missing"),
        (1, "tools", "required field 'tools' is missing"),
    ]


def test_a_decorated_python_target_keeps_its_args_model_schema_and_serializer(tmp_path):
    # the bundle rebuilt a @tool target from its bare function: an args_model became one nested 'args'
    # parameter, a parameters= schema became untyped parameters, and the serializer was dropped
    (tmp_path / "deco.py").write_text(
        "from pydantic import BaseModel\nfrom agentkit import tool\n\n"
        "class Q(BaseModel):\n    query: str\n\n"
        "@tool(args_model=Q, serializer=lambda v: 'got ' + v)\n"
        "def search(q: Q) -> str:\n    '''Search.'''\n    return q.query\n\n"
        "@tool(parameters={'type': 'object', 'properties': {'a': {'type': 'integer', 'minimum': 0}}, "
        "'required': ['a']}, timeout=4)\n"
        "def plain(a):\n    '''Plain.'''\n    return a\n"
    )
    p = write(
        tmp_path,
        """
        agentkit_bundle: 1
        name: d
        tools:
          - {name: find, python: "deco:search"}
          - {name: plain, python: "deco:plain", retries: 1}
        """,
    )
    find, plain = load_bundle(p).tools
    assert find.parameters["properties"] == {"query": {"type": "string"}}
    assert plain.parameters["properties"] == {"a": {"type": "integer", "minimum": 0}}
    assert (find.name, plain.timeout, plain.retries) == ("find", 4, 1)
    agent = Agent.from_bundle(
        p, backend=ScriptedBackend([[call("find", query="x"), call("plain", a=-1)], "ok"])
    )
    records = agent.run("q").tool_calls
    assert records[0].content == "got x"
    assert (
        records[1].error_kind == "invalid_arguments"
        and "-1 is less than the minimum of 0" in records[1].error
    )


def test_from_bundle_takes_tools_as_an_agent_keyword(tmp_path, pymod):
    # tools= is an Agent keyword like max_steps, but from_bundle passed the bundle's tools positionally as well:
    # TypeError "Agent.__init__() got multiple values for argument 'tools'"
    p = write(
        tmp_path,
        f"agentkit_bundle: 1\nname: t\nagent: {{max_steps: 3}}\ntools:\n  - {{name: add, python: '{pymod}:add'}}\n",
    )

    def sub(a: int, b: int) -> int:
        """Subtract."""
        return a - b

    bundled = load_bundle(p).tools
    agent = Agent.from_bundle(p, backend=ScriptedBackend([call("sub", a=5, b=2), "3"]), tools=[*bundled, sub])
    assert list(agent.tools) == ["add", "sub"] and agent.max_steps == 3
    assert agent.run("5-2?").tool_calls[0].content == "3"


@pytest.mark.parametrize("path, kind", [(123, "int"), (None, "NoneType"), ({"name": "x"}, "dict")])
def test_a_bundle_path_that_is_no_path_is_a_type_error_naming_it(path, kind):
    # was Python's "expected str, bytes or os.PathLike object, not int", naming no parameter
    for load in (load_bundle, Agent.from_bundle):
        with pytest.raises(TypeError, match=f"the bundle path must be a str or a pathlib.Path, got {kind}: "):
            load(path)
