"""Images on a run (API.md v1.2): `input` as a list of parts, each checked before anything is stored; the run keeps
the list as given; a model without vision is refused before any run exists; the demo model says what it was given."""

from __future__ import annotations

import base64
import hashlib

import jsonschema
import pytest

from agents.models import Document, Run
from tests.api.conftest import ARITHMETIC, RUNS, SEED, create_run, run_count, run_url
from tests.conftest import client_for, make_user

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(1253)  # 1,269 bytes: "1.2 KB"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(40)
GIF = b"GIF89a" + bytes(20)
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(20)
PUBLIC_URL = "https://93.184.215.14/cat.png"  # a public address, given as a literal: no lookup needed
THREADS = "/api/v1/threads"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def text(value: str = ARITHMETIC) -> dict:
    return {"type": "text", "text": value}


def image(raw: bytes = PNG, media_type: str = "image/png") -> dict:
    return {"type": "image", "data": b64(raw), "media_type": media_type}


def url_image(url: str = PUBLIC_URL) -> dict:
    return {"type": "image", "url": url}


def referenced(raw: bytes, media_type: str) -> dict:
    """The reference an earlier run's base64 image becomes in a later run's history: its stored Document's."""
    stored = Document.objects.get(sha256=hashlib.sha256(raw).hexdigest(), media_type=media_type)
    assert bytes(stored.data) == raw
    return {"type": "image", "document": str(stored.pk), "media_type": media_type, "size": len(raw)}


def refused(client, parts, url: str = RUNS) -> list[str]:
    """The `input` messages of a 400, after checking nothing was stored."""
    response = client.post(url, {"input": parts}, format="json")
    assert response.status_code == 400, response.content
    assert run_count() == 0
    return response.json()["input"]


@pytest.fixture(autouse=True)
def _bounds(settings):
    settings.AGENT_MAX_IMAGES = 8
    settings.AGENT_MAX_IMAGE_BYTES = 5 * 1024 * 1024
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False
    settings.AGENT_RATE_LIMIT = "100000/m"


# --- what is accepted, stored and returned ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "media_type"), [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")]
)
def test_each_image_type_is_taken_and_the_run_keeps_the_list_as_given(api, raw, media_type):
    parts = [text(), image(raw, media_type)]
    response = api.post(RUNS, {"input": parts}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["input"] == parts
    run = Run.objects.get(pk=body["id"])
    assert (run.input, run.input_parts) == (ARITHMETIC, parts)  # the text beside, for lists and search
    assert api.get(run_url(body["id"])).json()["input"] == parts
    listed = api.get(RUNS).json()["results"]
    assert listed[0]["input"] == parts


def test_a_string_input_is_stored_and_answered_as_before(api):
    body = create_run(api).json()
    assert body["input"] == ARITHMETIC
    assert Run.objects.get(pk=body["id"]).input_parts is None


def test_the_demo_model_says_what_it_was_given(api):
    body = api.post(RUNS, {"input": [text(), image()]}, format="json").json()
    assert (body["stop_reason"], body["output"]) == ("final_answer", "I was given 1 image (image/png, 1.2 KB). 85")


def test_the_demo_model_names_each_image_and_answers_an_image_alone(api):
    body = api.post(RUNS, {"input": [image(GIF, "image/gif"), url_image()]}, format="json").json()
    assert body["output"].startswith("I was given 2 images (image/gif, 26 bytes; a link to 93.184.215.14). ")
    assert Run.objects.get(pk=body["id"]).input == ""  # no text part: no text


def test_the_react_protocol_takes_images_too(api):
    body = api.post(RUNS, {"input": [text(), image()], "protocol": "react"}, format="json").json()
    assert body["output"] == "I was given 1 image (image/png, 1.2 KB). 85"


def test_the_seed_endpoint_takes_parts(api):
    response = api.post(SEED, {"input": [text(), image()]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["output"] == "I was given 1 image (image/png, 1.2 KB). 85"
    assert Run.objects.get().input_parts == [text(), image()]


def test_names_are_checked_by_what_they_resolve_to(api, resolver):
    resolver["images.example.test"] = ["93.184.215.14"]
    response = api.post(RUNS, {"input": [text(), url_image("https://images.example.test/a.png")]}, format="json")
    assert response.status_code == 201, response.content


# --- what is refused, naming the part -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ("hello", 'part 2: Expected an object such as {"type": "text", "text": "…"}, got a string.'),
        ({"type": "video", "url": PUBLIC_URL}, 'part 2: unknown type \'video\': a part is "text", "image" or "file".'),
        ({"text": "no type"}, 'part 2: unknown type none: a part is "text", "image" or "file".'),
        ({"type": "text"}, "part 2: text is missing."),
        ({"type": "text", "text": 5}, "part 2: text must be a string, got a number."),
        ({"type": "text", "text": "  \n"}, "part 2: text may not be blank."),
        ({"type": "text", "text": "a\x00b"}, "part 2: text may not hold a NUL character."),
        ({"type": "text", "text": "hi", "lang": "en"}, "part 2: unknown field 'lang': a text part has text."),
        ({"type": "image"}, "part 2: an image needs a url, or data with media_type."),
        ({"type": "image", "media_type": "image/png"}, "part 2: an image needs a url, or data with media_type."),
        (
            {"type": "image", "url": PUBLIC_URL, "data": b64(PNG), "media_type": "image/png"},
            "part 2: an image has a url or data, not both.",
        ),
        (
            {"type": "image", "url": PUBLIC_URL, "media_type": "image/png"},
            "part 2: unknown field 'media_type': an image part has url, or data and media_type.",
        ),
        (
            {"type": "image", "data": b64(PNG)},
            "part 2: data needs a media_type: one of image/png, image/jpeg, image/gif, image/webp.",
        ),
        (
            {"type": "image", "data": b64(PNG), "media_type": "image/svg+xml"},
            "part 2: media_type 'image/svg+xml' is not supported: it must be one of image/png, image/jpeg, "
            "image/gif, image/webp.",
        ),
        (
            {"type": "image", "data": "", "media_type": "image/png"},
            "part 2: data must be a base64 string, got an empty string.",
        ),  # fmt: skip
        (
            {"type": "image", "data": 5, "media_type": "image/png"},
            "part 2: data must be a base64 string, got a number.",
        ),
        ({"type": "image", "data": "not_base64!", "media_type": "image/png"}, "part 2: data is not valid base64."),
        (
            {"type": "image", "data": "data:image/png;base64," + b64(PNG), "media_type": "image/png"},
            "part 2: data is not valid base64 (send the base64 text alone, without a data: URL prefix).",
        ),
        (
            {"type": "image", "data": b64(PNG)[:8] + "\n" + b64(PNG)[8:], "media_type": "image/png"},
            "part 2: data is not valid base64 (without spaces or line breaks).",
        ),
        (
            image(JPEG, "image/png"),
            "part 2: media_type says image/png, but the bytes do not match: they are image/jpeg.",
        ),
        (
            image(b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/png"),
            "part 2: media_type says image/png, but the bytes do not match: they are not a PNG, JPEG, GIF or WebP "
            "image.",
        ),
        (
            url_image("http://93.184.215.14/cat.png"),
            "part 2: an image url must be https:// (send other images as base64 data with media_type).",
        ),  # fmt: skip
        (
            url_image("ftp://93.184.215.14/cat.png"),
            "part 2: an image url must be https:// (send other images as base64 data with media_type).",
        ),  # fmt: skip
        (url_image(5), "part 2: url must be a string, got a number."),
        (
            url_image("https://93.184.215.14/a b.png"),
            "part 2: url must be a URL of at most 2048 characters, without spaces or NUL.",
        ),  # fmt: skip
        (
            url_image("https://x.test/" + "a" * 2048),
            "part 2: url must be a URL of at most 2048 characters, without spaces or NUL.",
        ),  # fmt: skip
    ],
)
def test_a_bad_part_is_a_400_naming_it(api, part, message):
    assert refused(api, [text(), part]) == [message]


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://127.0.0.1/cat.png", "a loopback address"),
        ("https://10.1.2.3/cat.png", "a private address"),
        ("https://192.168.0.7/cat.png", "a private address"),
        ("https://169.254.169.254/latest/meta-data", "a cloud metadata address"),
        ("https://169.254.10.1/", "a link-local address"),
    ],
)
def test_a_url_to_a_private_address_is_refused_like_a_webhook(api, url, kind):
    (message,) = refused(api, [text(), url_image(url)])
    assert message.startswith("part 2: ") and kind in message
    assert message.endswith("image URLs may only go to public addresses.")


def test_a_name_is_refused_by_what_it_resolves_to_or_when_it_does_not(api, resolver):
    resolver["inside.example.test"] = ["10.20.30.40"]
    (message,) = refused(api, [url_image("https://inside.example.test/a.png")])
    assert message == (
        "part 1: inside.example.test resolves to 10.20.30.40, a private address: image URLs may only go to public "
        "addresses."
    )
    assert refused(api, [url_image("https://nowhere.example.test/a.png")]) == [
        "part 1: The host nowhere.example.test could not be resolved."
    ]


def test_private_urls_follow_the_webhooks_setting_but_metadata_never(api, settings):
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = True
    assert api.post(RUNS, {"input": [url_image("https://10.1.2.3/a.png")]}, format="json").status_code == 201
    assert "cloud metadata" in refused_again(api, [url_image("https://169.254.169.254/")])


def refused_again(client, parts) -> str:
    response = client.post(RUNS, {"input": parts}, format="json")
    assert response.status_code == 400, response.content
    return response.json()["input"][0]


def test_every_bad_part_is_named_at_once(api):
    messages = refused(api, [{"type": "text", "text": ""}, text(), image(JPEG, "image/gif"), {"type": "x"}])
    assert [m.split(":")[0] for m in messages] == ["part 1", "part 3", "part 4"]


def test_an_image_over_the_size_bound_is_refused(api, settings):
    settings.AGENT_MAX_IMAGE_BYTES = 1000
    assert refused(api, [image(PNG)]) == ["part 1: the image is 1.2 KB once decoded; at most 1000 bytes."]
    exactly = PNG[:1000]
    assert api.post(RUNS, {"input": [image(exactly)]}, format="json").status_code == 201


def test_a_bound_just_above_the_base64_length_is_checked_on_the_decoded_bytes(api, settings):
    settings.AGENT_MAX_IMAGE_BYTES = len(PNG) - 1  # its base64 fits the quick check (same length); decoding tells
    assert refused(api, [image(PNG)]) == ["part 1: the image is 1.2 KB once decoded; at most 1.2 KB."]


def test_too_many_images_are_refused(api, settings):
    settings.AGENT_MAX_IMAGES = 2
    assert refused(api, [text(), image(), image(GIF, "image/gif"), image()]) == [
        "At most 2 images per input (3 given)."
    ]
    assert api.post(RUNS, {"input": [text(), image(), image()]}, format="json").status_code == 201


def test_the_text_parts_share_the_input_bound(api, settings):
    settings.AGENT_MAX_INPUT_CHARS = 10
    assert refused(api, [text("a" * 6), text("b" * 5)]) == ["The text parts have 11 characters; at most 10 in all."]
    assert api.post(RUNS, {"input": [text("a" * 5), text("b" * 5)]}, format="json").status_code == 201


def test_an_empty_list_and_too_many_parts_are_refused(api):
    assert refused(api, [])[0].startswith("Give at least one part")
    assert refused(api, [text()] * 65) == ["At most 64 parts per input (65 given)."]


def test_other_json_types_are_refused_naming_both_forms(api):
    assert refused(api, {"type": "text", "text": "hi"}) == ["Expected a string or a list of parts, got an object."]


def test_with_no_images_allowed_input_is_a_string_only(api, settings):
    settings.AGENT_MAX_IMAGES = 0
    settings.AGENT_MAX_DOCUMENTS = 0  # nor documents: no list form at all (docs/documents.md)
    assert refused(api, [text()]) == ["Expected a string, got a list."]


# --- which models take images ----------------------------------------------------------------------------------


def test_a_provider_without_vision_is_a_400_before_any_run_exists(api, settings):
    settings.HF_TOKEN = "hf_test_key"
    body = {"input": [text(), image()], "provider": "huggingface"}
    response = api.post(RUNS, body, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "input": [
            "Model 'meta-llama/Llama-3.3-70B-Instruct' of provider 'huggingface' does not take images; choose a model "
            "that does, or send the input as text."
        ]
    }
    assert run_count() == 0
    # Text parts alone are fine for it (nothing to see), and so is a model the setting names.
    settings.HF_BASE_URL = "http://127.0.0.1:9/v1"  # never reached: step mode, background queue
    queued = api.post(RUNS, {**body, "input": [text()], "mode": "background"}, format="json")
    assert queued.status_code == 202, queued.content
    settings.AGENT_VISION_MODELS = {**settings.AGENT_VISION_MODELS, "huggingface": ["Qwen/Qwen2.5-VL-7B-Instruct"]}
    seeing = {**body, "model": "Qwen/Qwen2.5-VL-7B-Instruct", "mode": "background"}
    assert api.post(RUNS, seeing, format="json").status_code == 202


def test_a_vision_list_narrows_a_provider_that_sees(api, settings):
    settings.AGENT_VISION_MODELS = {**settings.AGENT_VISION_MODELS, "demo": ["demo-vision"]}
    message = refused(api, [text(), image()])[0]
    assert message.startswith("Model 'demo-1' of provider 'demo' does not take images")
    assert api.post(RUNS, {"input": ARITHMETIC}, format="json").status_code == 201  # a string: no check at all


def test_an_agents_model_counts(api, settings):
    from agents.models import Agent

    settings.HF_TOKEN = "hf_test_key"
    Agent.objects.create(name="texty", provider="huggingface")
    response = api.post(RUNS, {"input": [image()], "agent": "texty"}, format="json")
    assert response.status_code == 400
    assert "does not take images" in response.json()["input"][0]
    assert run_count() == 0


# --- threads ----------------------------------------------------------------------------------------------------


def test_a_thread_carries_earlier_image_parts_in_its_history(api):
    thread = api.post(THREADS, {}, format="json").json()["id"]
    first = api.post(RUNS, {"input": [text(), image()], "thread_id": thread}, format="json").json()
    second = create_run(api, input="and add 2", thread_id=thread).json()
    history = Run.objects.get(pk=second["id"]).history
    # The image is stored once and referenced (docs/documents.md): the history holds no copy of its bytes.
    assert history[0]["input_parts"] == [text(), referenced(PNG, "image/png")]
    assert history[0]["input"] == ARITHMETIC and history[0]["output"] == first["output"]
    runs = api.get(f"{THREADS}/{thread}").json()["runs"]
    assert [r["input"] for r in runs] == [[text(), image()], "and add 2"]  # each as it was given


def test_a_threads_images_stay_within_the_bound_newest_first(api, settings):
    settings.AGENT_MAX_IMAGES = 2
    thread = api.post(THREADS, {}, format="json").json()["id"]
    for raw, kind in ((PNG, "image/png"), (GIF, "image/gif")):
        api.post(RUNS, {"input": [text(), image(raw, kind)], "thread_id": thread}, format="json")
    last = api.post(RUNS, {"input": [text(), image(JPEG, "image/jpeg")], "thread_id": thread}, format="json").json()
    history = Run.objects.get(pk=last["id"]).history
    assert history[0]["input_parts"][1] == {"type": "text", "text": "(An image was here; it is not shown again.)"}
    assert history[1]["input_parts"][1] == referenced(GIF, "image/gif")  # the newest earlier one fits beside the new


def test_a_model_without_vision_gets_notes_for_a_threads_images(api, settings):
    thread = api.post(THREADS, {}, format="json").json()["id"]
    api.post(RUNS, {"input": [text(), image()], "thread_id": thread}, format="json")
    settings.AGENT_VISION_MODELS = {**settings.AGENT_VISION_MODELS, "demo": ["demo-vision"]}
    later = create_run(api, input="and add 2", thread_id=thread).json()
    assert later["status"] == "done"
    (turn,) = Run.objects.get(pk=later["id"]).history
    assert turn["input_parts"] == [text(), {"type": "text", "text": "(An image was here; it is not shown again.)"}]


def test_another_users_run_with_images_is_not_theirs_to_read(api, alice):
    run_id = api.post(RUNS, {"input": [image()]}, format="json").json()["id"]
    other = client_for(make_user("mallory"))
    assert other.get(run_url(run_id)).status_code == 404


# --- the served schema says the same ------------------------------------------------------------------------------


def test_the_schema_describes_the_parts_a_run_takes_and_answers(api):
    document = api.get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    schemas = document["components"]["schemas"]
    given = [text(), image(), image(WEBP, "image/webp"), url_image()]
    answered = api.post(RUNS, {"input": given}, format="json").json()["input"]
    for where in (schemas["RunCreate"]["properties"]["input"], schemas["Run"]["properties"]["input"]):
        listed = where["oneOf"][1]
        jsonschema.validate(answered, {"components": {"schemas": schemas}, **listed})
    part = {
        "components": {"schemas": schemas},
        "oneOf": schemas["RunCreate"]["properties"]["input"]["oneOf"][1]["items"]["oneOf"],
    }
    for bad in ({"type": "text", "text": " "}, {"type": "image", "url": "http://x.test/"}, {"type": "video"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, part)
