"""Images in MCP tool results: content parts for backends that take images (scripted with ``takes_images``, the
OpenAI backend's extra user message, the embedded vision path), a note elsewhere, and each limit (count, bytes,
real format, the soft-token share). The fixture server runs with ``--images`` (its ``picture``/``pictures``)."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import textwrap

import httpx
import pytest
from mcp_helpers import PY, SERVER, embedded_test_backend, free_port, http_process
from openai_fakes import completion
from PIL import Image

from agentkit import (
    Agent,
    BundleError,
    MaxStepsExceeded,
    ToolContent,
    ToolImage,
    ToolImageLimits,
    load_bundle,
)
from agentkit.backends.openai import OpenAIBackend
from agentkit.backends.scripted import ScriptedBackend, answer, call
from agentkit.mcp import MCPToolset
from agentkit.tool_output import ToolImageShare

_spec = importlib.util.spec_from_file_location("mcp_fixture_server", SERVER)
assert _spec is not None and _spec.loader is not None
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)


def images_server(**opts) -> MCPToolset:
    return MCPToolset.stdio(
        PY, [SERVER, "--images"], name="fixture", include=["picture", "pictures", "add"], **opts
    )


def run(script, *, takes_images=True, **agent_kw):
    backend = ScriptedBackend(script, takes_images=takes_images)
    agent = Agent(backend, toolsets=[images_server()], loop_guard=None, **agent_kw)
    return agent.run("go"), backend


def tool_contents(backend: ScriptedBackend, request: int = 1) -> list:
    return [m["content"] for m in backend.requests[request].messages if m["role"] == "tool"]


def url_of(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def test_scripted_backend_gets_exact_base64_parts_only_when_it_takes_images():
    png = fixture.picture_bytes(0, 32, "PNG")
    note = f"a square\n[image image/png, {len(png)} bytes]"
    result, backend = run([call("picture"), answer("done")])
    assert tool_contents(backend) == [
        [
            {"type": "text", "text": note},
            {"type": "image_url", "image_url": {"url": url_of(png, "image/png")}},
        ]
    ]
    rec = result.steps[0].tool_calls[0]
    assert rec.content == note and rec.result == ToolContent("a square", (ToolImage(png, "image/png"),))
    with Image.open(io.BytesIO(png)) as im:
        assert (im.format, im.size) == ("PNG", (32, 32))

    _, plain = run([call("picture"), answer("done")], takes_images=False)
    assert tool_contents(plain) == [note]  # a backend without images: the note, as before


def test_http_server_and_a_python_tool_returning_tool_content():
    jpeg = fixture.picture_bytes(1, 16, "JPEG")

    def snapshot() -> ToolContent:
        """A camera snapshot."""
        return ToolContent("", (ToolImage(jpeg, "image/jpeg"),))

    port = free_port()
    with http_process([PY, SERVER, "--images", "--http", str(port)], port):
        remote = MCPToolset.http(f"http://127.0.0.1:{port}/mcp", include=["picture"])
        backend = ScriptedBackend([[call("picture"), call("snapshot")], answer("done")], takes_images=True)
        result = Agent(backend, tools=[snapshot], toolsets=[remote]).run("go")
    png = fixture.picture_bytes(0, 32, "PNG")
    assert tool_contents(backend) == [
        [
            {"type": "text", "text": f"a square\n[image image/png, {len(png)} bytes]"},
            {"type": "image_url", "image_url": {"url": url_of(png, "image/png")}},
        ],
        [
            {"type": "text", "text": f"[image image/jpeg, {len(jpeg)} bytes]"},
            {"type": "image_url", "image_url": {"url": url_of(jpeg, "image/jpeg")}},
        ],
    ]
    assert result.steps[0].tool_calls[1].content == f"[image image/jpeg, {len(jpeg)} bytes]"


def test_openai_backend_puts_the_images_in_a_user_message_after_the_tool_messages():
    bodies = []
    replies = [
        completion(tool_calls=[("c1", "picture", "{}"), ("c2", "add", '{"a": 1, "b": 2}')]),
        completion(content="done"),
    ]

    def server(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=replies.pop(0))

    backend = OpenAIBackend("m", base_url="http://fake.local/v1", transport=httpx.MockTransport(server))
    result = Agent(backend, toolsets=[images_server()]).run("go")
    assert result.answer == "done"
    png = fixture.picture_bytes(0, 32, "PNG")
    sent = bodies[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": f"a square\n[image image/png, {len(png)} bytes]",
    }
    assert sent[3] == {"role": "tool", "tool_call_id": "c2", "content": "3"}
    assert sent[4] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Images returned by tool picture (call c1):"},
            {"type": "image_url", "image_url": {"url": url_of(png, "image/png")}},
        ],
    }
    assert "Images returned" not in json.dumps(bodies[0])


def test_at_most_eight_images_and_five_mib_each():
    assert ToolImageLimits().max_bytes == 5 * 1024 * 1024 and ToolImageLimits().max_images == 8
    result, backend = run([[call("pictures", count=10, side=8), call("pictures", side=1400)], answer("done")])
    many, big = tool_contents(backend)
    assert [p["type"] for p in many] == ["text"] + ["image_url"] * 8
    for k, part in enumerate(many[1:]):
        assert part["image_url"]["url"] == url_of(fixture.picture_bytes(k, 8, "PNG"), "image/png")
    tail = many[0]["text"].splitlines()[-2:]
    assert tail == [
        f"[agentkit: image {k} not shown: a tool response shows at most 8 images]" for k in (9, 10)
    ]
    size = len(fixture.picture_bytes(0, 1400, "PNG"))
    assert size > 5 * 1024 * 1024
    assert big == [
        {
            "type": "text",
            "text": f"1 pictures\n[image image/png, {size} bytes]\n"
            f"[agentkit: image 1 not shown: {size:,} bytes, over the 5,242,880-byte limit]",
        }
    ]
    assert result.steps[0].tool_calls[1].content == f"1 pictures\n[image image/png, {size} bytes]"


def test_the_real_format_decides_png_jpeg_webp_only():
    script = [
        [
            call("pictures", format="GIF", mime="image/png"),  # a GIF declared as PNG
            call("pictures", format="PNG", mime="image/gif"),  # a PNG declared as GIF: shown as PNG
            call("pictures", format="JPEG"),
            call("pictures", format="WEBP"),
            call("pictures", corrupt=True),
        ],
        answer("done"),
    ]
    _, backend = run(script)
    gif, png, jpeg, webp, bad = tool_contents(backend)
    assert len(gif) == 1 and gif[0]["text"].endswith(
        "[agentkit: image 1 not shown: it is GIF (declared image/png); PNG, JPEG and WebP are shown]"
    )
    assert png[1]["image_url"]["url"] == url_of(fixture.picture_bytes(0, 32, "PNG"), "image/png")
    assert jpeg[1]["image_url"]["url"] == url_of(fixture.picture_bytes(0, 32, "JPEG"), "image/jpeg")
    assert webp[1]["image_url"]["url"] == url_of(fixture.picture_bytes(0, 32, "WEBP"), "image/webp")
    assert len(bad) == 1 and bad[0]["text"].endswith(
        "[agentkit: image 1 not shown: its data (declared image/png) is not a readable image]"
    )


def test_a_tool_image_of_anything_but_the_files_bytes_is_refused_where_it_is_made():
    # a PIL image was kept and failed later as "TypeError: object of type 'Image' has no len()"; a str was
    # counted as bytes ("[image image/png, 8 bytes]") and base64-encoded nowhere
    with Image.new("RGB", (4, 4)) as im:
        for data in (im, "notbytes", None):
            with pytest.raises(TypeError, match=r"ToolImage\.data must be the image file's bytes .* got "):
                ToolImage(data, "image/png")  # type: ignore[arg-type]
    assert ToolImage(b"\x89PNG", "image/png").data == b"\x89PNG"


def test_soft_token_share_per_step_and_settings():
    limits = ToolImageLimits(vision_budget=70, max_soft_tokens=150)
    script = [
        [call("pictures", count=1), call("pictures", count=2)],
        call("pictures", count=2),
        answer("done"),
    ]
    _, backend = run(script, tool_images=limits)
    one, two = tool_contents(backend, 1)
    assert one[1] == {
        "type": "image_url",
        "image_url": {"url": url_of(fixture.picture_bytes(0, 32, "PNG"), "image/png")},
        "vision_budget": 70,
    }
    assert [p["type"] for p in two] == ["text", "image_url"]  # 70 + 70 of 150 taken: the third is a note
    assert two[0]["text"].endswith(
        "[agentkit: image 2 not shown: its 70 soft tokens exceed the 10 left of the 150 this step's tool images "
        "may take]"
    )
    later = tool_contents(backend, 2)[-1]  # the next step has its own share
    assert [p["type"] for p in later] == ["text", "image_url", "image_url"]

    class Counting:  # a backend that counts tokens, as the embedded one
        takes_images = True
        max_prompt_tokens = 1792

        def count_tokens(self, text: str) -> int:
            return len(text)

    assert ToolImageLimits().soft_token_budget(Counting()) == 448  # half the tool-output share (896)
    assert ToolImageLimits().soft_token_budget(ScriptedBackend([])) is None
    assert ToolImageShare(ScriptedBackend([]), ToolImageLimits()).content("t", ToolContent("t")) == "t"
    with pytest.raises(ValueError, match=r"max_images\n  Input should be greater than or equal to 1"):
        ToolImageLimits(max_images=0)
    with pytest.raises(ValueError, match="vision budget 100 is not supported"):
        ToolImageLimits(vision_budget=100)
    with pytest.raises(TypeError, match="tool_images must be a ToolImageLimits"):
        Agent(ScriptedBackend([]), tool_images={"max_images": 2})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def embedded():
    return embedded_test_backend(max_new_tokens=16)


def test_embedded_prompt_holds_the_image_soft_tokens_in_the_tool_response(embedded):
    """The tiny checkpoint's vision tower is untrained: the prompt is checked, not the answer."""
    cm = embedded.chat_model
    seen = []
    encode_turn = cm.encode_turn

    def recording(messages, tools=None, vision_budget=None):
        ids, vision = encode_turn(messages, tools, vision_budget)
        seen.append((ids, vision))
        return ids, vision

    cm.encode_turn = recording
    try:
        agent = Agent(
            embedded,
            toolsets=[MCPToolset.stdio(PY, [SERVER, "--images"], name="fixture", include=["picture"])],
            tool_choice={"name": "picture"},
            max_steps=2,
            loop_guard=None,
            tool_images=ToolImageLimits(vision_budget=70),
        )
        try:
            agent.run("Show me the picture")
        except MaxStepsExceeded:  # the second turn may call again: its prompt is what is checked
            pass
    finally:
        del cm.encode_turn
    assert embedded.takes_images is True
    assert seen[0][1] is None  # the first turn has no image
    ids, vision = seen[1]
    assert vision is not None and vision.budgets == [70] and 0 < vision.soft_tokens[0] <= 70
    tok = cm.tokenizer
    image, boi, eoi = (tok.convert_tokens_to_ids(t) for t in ("<|image|>", "<|image>", "<image|>"))
    opened, closed = (
        tok.convert_tokens_to_ids("<|tool_response>"),
        tok.convert_tokens_to_ids("<tool_response|>"),
    )
    start = ids.index(opened)
    end = ids.index(closed, start)
    response = ids[start:end]
    n = vision.soft_tokens[0]
    first = response.index(boi)
    assert response[first : first + n + 2] == [boi] + [image] * n + [eoi]  # inside the tool response
    assert ids.count(image) == n and ids.count(boi) == 1  # and nowhere else
    text = tok.decode(response[:first])
    assert "response:picture" in text and "a square" in text


def test_bundle_agent_section_sets_the_limits(tmp_path):
    text = textwrap.dedent(
        f"""\
        agentkit_bundle: 1
        name: b
        tools: []
        toolsets:
          - mcp: {{command: python, args: [{json.dumps(SERVER)}, --images], include: [pictures]}}
        agent:
          tool_images: {{max_images: 1, vision_budget: 70}}
        """
    )
    path = tmp_path / "bundle.yaml"
    path.write_text(text)
    bundle = load_bundle(path)
    backend = ScriptedBackend([call("pictures", count=2), answer("done")], takes_images=True)
    agent = bundle.make_agent(backend=backend)
    assert agent.tool_images == ToolImageLimits(max_images=1, vision_budget=70)
    agent.run("go")
    parts = tool_contents(backend)[0]
    assert [p["type"] for p in parts] == ["text", "image_url"] and parts[1]["vision_budget"] == 70
    assert parts[0]["text"].endswith("[agentkit: image 2 not shown: a tool response shows at most 1 image]")

    path.write_text(text.replace("max_images: 1", "max_image: 1"))
    with pytest.raises(BundleError) as err:
        load_bundle(path)
    assert (
        "bundle.yaml:7" in str(err.value)
        and "agent.tool_images" in str(err.value)
        and "max_image" in str(err.value)
    )
