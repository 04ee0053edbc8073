"""Images in agent turns (model/heads/vision.py and its callers): soft tokens per vision budget, image tokens in the
prompt, EXIF orientation, the prefill's pixel inputs (parity with transformers' ``generate``, the batcher),
history and the openai backend's content parts, and every error case as one line."""

from __future__ import annotations

import base64
import io
import json
import shutil

import httpx
import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from agentkit import Agent
from agentkit.backends.openai import OpenAIBackend
from agentkit.backends.scripted import ScriptedBackend
from agentkit.cli import app
from agentkit.history import Conversation
from model.checkpoint.loading import load_checkpoint
from model.heads.vision import (
    VISION_BUDGETS,
    ImageError,
    VisionProcessor,
    open_image,
    prepare_images,
    to_data_url,
    vision_processor,
)
from model.runtime import generate
from model.turn.chat import ChatModel
from model.turn.prefill import image_inputs

#: (height, width) in pixels whose soft tokens are exactly the budget: (48 h) x (48 w) with h * w = budget.
EXACT = {70: (336, 480), 140: (480, 672), 280: (672, 960), 560: (960, 1344), 1120: (1344, 1920)}


def _noise(h: int, w: int, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))


def _png(image: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    from model.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("vision"), canvas_length=16)
    return load_checkpoint(path)


@pytest.fixture(scope="module")
def vp(ck):
    return vision_processor(ck)


# ---------------------------------------------------------------------------------------------------------- budgets
@pytest.mark.parametrize("budget", VISION_BUDGETS)
def test_soft_tokens_per_budget(vp, budget):
    # the checkpoint's image processor alone (the tiny tower's 64 positions per side would refuse 560 and 1120)
    vp = VisionProcessor(vp.image_processor, vp.image_token_id, vp.boi_token_id, vp.eoi_token_id)
    h, w = EXACT[budget]
    exact = vp.process([_noise(h, w)], budget)
    assert exact.soft_tokens == [budget]
    assert tuple(exact.pixel_values.shape) == (1, budget * 9, 3 * 16 * 16)
    assert int((exact.image_position_ids[0, :, 0] >= 0).sum()) == budget * 9  # no padding patch
    other = vp.process([_noise(70, 100)], budget)  # another shape: at most the budget, and most of it
    assert 0.8 * budget <= other.soft_tokens[0] <= budget


def test_mixed_budgets_share_one_batch_and_keep_their_counts(ck, vp):
    small, large = _noise(*EXACT[70]), _noise(*EXACT[280], seed=1)
    both = vp.process([small, large], [70, 280])
    assert both.soft_tokens == [70, 280] and both.pixel_values.shape[1] == 280 * 9
    enc = ck.model.model.encoder
    a = vp.process([small], 70)
    with torch.no_grad():
        fa = enc.get_image_features(a.pixel_values, a.image_position_ids).pooler_output
        fb = enc.get_image_features(both.pixel_values, both.image_position_ids).pooler_output
    assert fb.shape[0] == 350
    torch.testing.assert_close(fb[:70], fa, rtol=1e-4, atol=1e-5)  # padding patches change nothing


# ----------------------------------------------------------------------------------------------- prompt placement
def test_image_tokens_are_placed_where_the_image_part_is(ck, vp):
    cm = ChatModel(ck)
    url = to_data_url(_noise(*EXACT[70]))
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "before"},
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": "after"},
            ],
        },
    ]
    turn = cm.prepare(messages, vision_budget=70)
    ids = turn.input_ids
    boi, eoi, img = vp.boi_token_id, vp.eoi_token_id, vp.image_token_id
    assert ids.count(boi) == 1 and ids.count(eoi) == 1 and ids.count(img) == 70
    b, e = ids.index(boi), ids.index(eoi)
    assert ids[b + 1 : e] == [img] * 70
    tok = ck.tokenizer
    assert tok.decode(ids[:b]).endswith("user\nbefore")
    assert tok.decode(ids[e + 1 :]).startswith("after<turn|>")
    # the text-only rendering with one <|image|> where the part was, expanded: nothing else moves
    plain = cm.encode([messages[0], {"role": "user", "content": "before<|image|>after"}])
    assert plain.count(img) == 0  # user text spelling the token stays text
    assert turn.vision.soft_tokens == [70] and turn.vision.budgets == [70]


def test_each_image_gets_its_own_budget_in_prompt_order(ck, vp):
    cm = ChatModel(ck)
    parts = [
        {"type": "image_url", "image_url": {"url": to_data_url(_noise(*EXACT[140]))}, "vision_budget": 140},
        {"type": "image_url", "image_url": {"url": to_data_url(_noise(*EXACT[70]))}},
        {"type": "text", "text": "compare"},
    ]
    turn = cm.prepare([{"role": "user", "content": parts}], vision_budget=70)
    assert turn.vision.soft_tokens == [140, 70]
    ids = turn.input_ids
    first = ids.index(vp.boi_token_id)
    assert ids[first + 141] == vp.eoi_token_id and ids[first + 142] == vp.boi_token_id


# ---------------------------------------------------------------------------------------------------------- EXIF
def test_exif_rotated_input_equals_the_upright_image_after_processing(vp, tmp_path):
    upright = _noise(48 * 7, 48 * 10, seed=5)
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # as a sideways camera writes it
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    tagged = tmp_path / "phone.png"
    tagged.write_bytes(_png(stored, exif=exif.tobytes()))
    untagged = tmp_path / "sideways.png"
    untagged.write_bytes(_png(stored))
    got = vp.process([open_image(tagged)], 70)
    want = vp.process([upright], 70)
    assert open_image(tagged).size == upright.size
    assert torch.equal(got.pixel_values, want.pixel_values)
    assert torch.equal(got.image_position_ids, want.image_position_ids)
    assert not torch.equal(vp.process([open_image(untagged)], 70).pixel_values, want.pixel_values)


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_png_jpeg_and_webp_are_accepted_and_keep_their_encoding(tmp_path, fmt, mime):
    p = tmp_path / f"x.{fmt.lower()}"
    _noise(40, 60).save(p, format=fmt)
    url = to_data_url(p)
    assert url.startswith(f"data:{mime};base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == p.read_bytes()
    assert open_image(url).size == (60, 40)


# ------------------------------------------------------------------------------------------- runtime and batcher
def test_prefill_with_images_is_token_identical_to_transformers_generate(ck, vp):
    cm = ChatModel(ck)
    msgs = [
        {
            "role": "user",
            "content": [{"type": "image", "image": _noise(70, 100)}, {"type": "text", "text": "x"}],
        }
    ]
    turn = cm.prepare(msgs, constrained=False, vision_budget=70)
    ids = torch.tensor([turn.input_ids])
    v = turn.vision
    ours = generate(
        ck.model,
        ids,
        ck.settings.replace(max_new_tokens=32),
        seed=4,
        parity=True,
        pixel_values=v.pixel_values,
        image_position_ids=v.image_position_ids,
    )
    torch.manual_seed(4)
    ref = ck.model.generate(
        ids,
        pixel_values=v.pixel_values,
        image_position_ids=v.image_position_ids,
        mm_token_type_ids=image_inputs(ck.model, ids, v.pixel_values, v.image_position_ids, None)[
            "mm_token_type_ids"
        ],
        max_new_tokens=32,
    )
    assert torch.equal(ours.sequences, ref.sequences)
    blind = generate(ck.model, ids, ck.settings.replace(max_new_tokens=32), seed=4, parity=True)
    assert not torch.equal(blind.sequences, ours.sequences)  # the pixels reach the encoder


def test_a_batched_row_with_images_draws_exactly_like_generate(ck):
    from model.runtime.batcher import CanvasBatcher

    cm = ChatModel(ck)
    msgs = [
        {
            "role": "user",
            "content": [{"type": "image", "image": _noise(50, 90)}, {"type": "text", "text": "y"}],
        }
    ]
    turn = cm.prepare(msgs, constrained=False, vision_budget=140)
    settings = ck.settings.replace(max_new_tokens=32, eos_token_ids=(ck.settings.pad_token_id + 7,))
    solo = generate(
        ck.model,
        torch.tensor([turn.input_ids]),
        settings,
        seed=9,
        pixel_values=turn.vision.pixel_values,
        image_position_ids=turn.vision.image_position_ids,
    ).new_tokens[0]
    b = CanvasBatcher(ck.model, settings, max_batch=4)
    try:
        other = b.submit([2, 30, 31, 32], seed=1)
        got = b.submit(turn.input_ids, seed=9, vision=turn.vision).future.result(timeout=60)
        other.future.result(timeout=60)
    finally:
        b.close()
    assert got.tokens == [t for t in solo.tolist() if t != settings.pad_token_id]


# ----------------------------------------------------------------------------------------------- agent and history
def test_agent_run_puts_images_in_the_message_history_and_saved_conversation(tmp_path):
    photo = tmp_path / "p.png"
    _noise(30, 40).save(photo)
    backend = ScriptedBackend(["a red square", "still red"])
    agent = Agent(backend)
    session = agent.chat()
    session.send("what is it?", images=[photo], vision_budget=560)
    sent = backend.requests[0].messages[-1]["content"]
    assert [p["type"] for p in sent] == ["image_url", "text"]
    assert sent[0]["vision_budget"] == 560 and sent[1]["text"] == "what is it?"
    assert base64.b64decode(sent[0]["image_url"]["url"].split(",", 1)[1]) == photo.read_bytes()
    session.send("and now?")
    assert backend.requests[1].messages[0]["content"] == sent  # the image stays in the kept history
    session.save(tmp_path / "c.json")
    back = Conversation.load(tmp_path / "c.json")
    assert back.messages == session.conversation.messages and back.messages[0]["content"] == sent
    assert back.to_json() == session.conversation.to_json()


def test_saved_conversations_refuse_malformed_parts():
    with pytest.raises(ValueError, match=r"message 0 part 1: content parts are 'text' or 'image_url'"):
        Conversation(
            [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "audio"}]},
                {"role": "assistant", "content": "b"},
            ]
        )
    with pytest.raises(ValueError, match=r"image_url part needs image_url.url"):
        Conversation(
            [
                {"role": "user", "content": [{"type": "image_url", "image_url": "x"}]},
                {"role": "assistant", "content": "b"},
            ]
        )
    with pytest.raises(ValueError, match="message 1 content must be a string"):
        Conversation([{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "text"}]}])


def test_the_openai_backend_sends_content_parts_without_the_budget(tmp_path):
    seen = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        msg = {"role": "assistant", "content": "a cat"}
        return httpx.Response(
            200,
            json={
                "id": "x",
                "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            },
        )

    jpg = tmp_path / "c.jpg"
    _noise(20, 30).save(jpg, format="JPEG")
    backend = OpenAIBackend("vlm", base_url="http://fake.local/v1", transport=httpx.MockTransport(server))
    result = Agent(backend).run("what animal?", images=[jpg], vision_budget=140)
    assert result.answer == "a cat"
    content = seen[0]["messages"][-1]["content"]
    assert content == [
        {"type": "image_url", "image_url": {"url": to_data_url(jpg)}},
        {"type": "text", "text": "what animal?"},
    ]
    assert result.conversation.messages[0]["content"][0]["vision_budget"] == 140  # kept on our side


def test_embedded_chat_model_reads_images_end_to_end(ck):
    cm = ChatModel(ck)
    out = cm.chat(
        [
            {
                "role": "user",
                "content": [{"type": "image", "image": _noise(60, 60)}, {"type": "text", "text": "z"}],
            }
        ],
        seed=0,
        max_new_tokens=16,
        vision_budget=70,
    )
    assert out.prompt_tokens >= 70 + 2  # the soft tokens and their boi/eoi are in the prompt


# ---------------------------------------------------------------------------------------------------------- errors
def _err(fn):
    with pytest.raises(ImageError) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_every_bad_image_is_a_one_line_error_naming_it(tmp_path, vp):
    good = _png(_noise(30, 30))
    (tmp_path / "trunc.png").write_bytes(good[: len(good) // 2])
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    _noise(10, 10).save(tmp_path / "anim.gif")
    (tmp_path / "dir.png").mkdir()
    cases = {
        str(tmp_path / "trunc.png"): "corrupt or truncated PNG",
        str(tmp_path / "junk.png"): "not a readable image",
        str(tmp_path / "anim.gif"): "unsupported image format GIF (accepted: PNG, JPEG, WebP)",
        str(tmp_path / "missing.png"): "no such image file",
        str(tmp_path / "dir.png"): "is a directory",
        "https://example.com/cat.png": "remote image URLs are not fetched",
        "data:image/png;base64,@@@": "base64 payload does not decode",
        "data:image/png,rawbytes": "not a base64 data URL",
    }
    for source, why in cases.items():
        msg = _err(lambda s=source: open_image(s))
        assert why in msg and (source.split(",")[0][:20] in msg or source.startswith("data:"))
    assert "object" in _err(lambda: open_image(42))
    for budget in (0, 100, 281, True, "280", 2240):
        assert "use one of 70, 140, 280, 560, 1120" in _err(lambda b=budget: vp.process([_noise(9, 9)], b))
        assert "vision budget" in _err(
            lambda b=budget: Agent(ScriptedBackend(["x"])).run("q", vision_budget=b)
        )


def test_agent_refuses_a_bad_image_before_the_model_is_asked(tmp_path):
    backend = ScriptedBackend(["never"])
    msg = _err(lambda: Agent(backend).run("q", images=[tmp_path / "nope.jpg"]))
    assert str(tmp_path / "nope.jpg") in msg and backend.requests == []
    assert "wrap it in a list" in _err(lambda: Agent(backend).run("q", images=str(tmp_path / "a.png")))


def test_a_checkpoint_that_cannot_read_images_says_so(ck, tmp_path):
    import copy

    folder = tmp_path / "novision"
    shutil.copytree(ck.source, folder)
    (folder / "processor_config.json").unlink()
    blind = load_checkpoint(folder)
    msgs = [
        {
            "role": "user",
            "content": [{"type": "image", "image": _noise(20, 20)}, {"type": "text", "text": "q"}],
        }
    ]
    msg = _err(lambda: ChatModel(blind).chat(msgs))
    assert str(folder) in msg and "no usable image processor config" in msg
    towerless = copy.copy(ck)
    towerless.__dict__.pop("_vision", None)  # the processor cached on the original
    towerless.model = copy.copy(ck.model)
    towerless.model.config = copy.deepcopy(ck.model.config)
    towerless.model.config.vision_config = None
    msg = _err(lambda: prepare_images(towerless, msgs))
    assert "has no vision tower: it cannot read images" in msg


def test_cli_image_errors_exit_2_with_one_line(tmp_path):
    (tmp_path / "b.yaml").write_text(
        "agentkit_bundle: 1\nname: b\nmodel: {backend: scripted, name: s.json}\ntools: []\n"
    )
    (tmp_path / "s.json").write_text(json.dumps(["a photo"]))
    (tmp_path / "bad.webp").write_bytes(b"RIFF....WEBPjunk")
    runner = CliRunner()
    for args, why in [
        (["--image", str(tmp_path / "bad.webp")], "bad.webp: not a readable image"),
        (["--image", str(tmp_path / "none.png")], "none.png: no such image file"),
        (["--vision-budget", "100"], "vision budget 100 is not supported"),
    ]:
        r = runner.invoke(app, ["run", str(tmp_path / "b.yaml"), "what?", *args])
        assert r.exit_code == 2, r.output
        assert why in r.output and "Traceback" not in r.output
        r = runner.invoke(app, ["generate", "what?", "--model", str(tmp_path), *args])
        assert r.exit_code == 2 and why in r.output
    ok = tmp_path / "ok.png"
    _noise(20, 20).save(ok)
    r = runner.invoke(app, ["run", str(tmp_path / "b.yaml"), "what?", "--image", str(ok), "--json"])
    assert r.exit_code == 0, r.output
    content = json.loads(r.output)["conversation"]["messages"][0]["content"]
    assert content[0]["type"] == "image_url" and content[1] == {"type": "text", "text": "what?"}


def test_a_patch_grid_beyond_the_towers_positions_is_one_line(ck, vp):
    """The tiny tower has positions for 64 patches per side; an elongated image at 280 needs more."""
    assert vp.max_side == 64
    msg = _err(lambda: vp.process([_noise(100, 300)], 280))
    assert "image 1 (300x100 px) at vision budget 280" in msg and "positions for 64" in msg
    assert vp.process([_noise(100, 300)], 70).soft_tokens[0] <= 70


def test_an_image_error_names_the_image_within_its_message(ck):
    """A chat's prompt holds the history's images too: the error counted them ("image 3"), the user sent 2."""
    ok, wide = to_data_url(_noise(20, 20)), to_data_url(_noise(100, 300))

    def user(*urls):
        return {
            "role": "user",
            "content": [
                *({"type": "image_url", "image_url": {"url": u}} for u in urls),
                {"type": "text", "text": "what?"},
            ],
        }

    history = [{"role": "system", "content": "Be brief."}, user(ok), {"role": "assistant", "content": "A."}]
    msg = _err(lambda: prepare_images(ck, [*history, user(ok, wide)]))
    assert msg.startswith("image 2 of the latest user message (300x100 px) at vision budget 280"), msg
    msg = _err(
        lambda: prepare_images(
            ck, [user(ok), {"role": "assistant", "content": "A."}, user(wide), history[2], user(ok)]
        )
    )
    assert msg.startswith("image 1 of user message 2 (300x100 px)"), msg  # the system prompt is not counted


def test_cli_run_an_image_the_tower_cannot_place_exits_2_like_generate(ck, tmp_path):
    # the embedded backend wrapped this ImageError in a BackendError: `run` exited 1, `generate` 2
    (tmp_path / "b.yaml").write_text(
        f"agentkit_bundle: 1\nname: b\nmodel: {{name: '{ck.source}', max_new_tokens: 16}}\ntools: []\n"
    )
    wide = tmp_path / "wide.png"
    _noise(100, 300).save(wide)
    r = CliRunner().invoke(
        app, ["run", str(tmp_path / "b.yaml"), "what?", "--image", str(wide), "--threads", "1"]
    )
    assert r.exit_code == 2, r.output
    assert "image 1 of the latest user message (300x100 px) at vision budget 280" in r.output
    assert "BackendError" not in r.output


def test_a_cmyk_image_object_is_converted_not_refused():
    url = to_data_url(_noise(20, 30).convert("CMYK"))
    assert url.startswith("data:image/png;base64,") and open_image(url).size == (30, 20)
