"""Documents on a run (docs/documents.md): `{"type": "file", ...}` parts by base64 data or by URL (fetched through
the webhooks' SSRF guard), checked before anything is stored, stored once per owner and content, and referenced,
never copied: by the run, by a thread's later runs, by the API's run object. Driven through the REST API with the
offline demo model (which names each document and reads a text document's first line)."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import jsonschema
import pytest

from agents.models import Document, Run
from agents.runs import documents
from tests.api.conftest import ARITHMETIC, RUNS, SEED, run_url
from tests.conftest import client_for, make_user
from tests.integration._support import ROOT
from tests.support.doc_tours import send, tour

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
TEXT = b"What is 12*7, plus 1?\nThe second line of the notes.\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)
THREADS = "/api/v1/threads"
PAGE = ROOT / "docs" / "documents.md"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def text(value: str = ARITHMETIC) -> dict:
    return {"type": "text", "text": value}


def pdf(raw: bytes = PDF, name: str | None = "report.pdf") -> dict:
    part = {"type": "file", "data": b64(raw), "media_type": "application/pdf"}
    return {**part, "name": name} if name else part


def notes(raw: bytes = TEXT, name: str | None = "notes.txt", media_type: str = "text/plain") -> dict:
    part = {"type": "file", "data": b64(raw), "media_type": media_type}
    return {**part, "name": name} if name else part


def stored(raw: bytes, media_type: str, owner=None) -> Document:
    found = Document.objects.filter(sha256=hashlib.sha256(raw).hexdigest(), media_type=media_type)
    return (found if owner is None else found.filter(owner=owner)).get()


def reference(raw: bytes, media_type: str, name: str, owner=None) -> dict:
    document = stored(raw, media_type, owner)
    return {"type": "file", "document": str(document.pk), "media_type": media_type, "name": name, "size": len(raw)}


def counts() -> tuple[int, int]:
    return Run.objects.count(), Document.objects.count()


def refused(client, parts, url: str = RUNS, **fields) -> list[str]:
    """The `input` messages of a 400, after checking that neither a run nor a document was stored."""
    before = counts()
    response = client.post(url, {"input": parts, **fields}, format="json")
    assert response.status_code == 400, response.content
    assert counts() == before
    return response.json()["input"]


@pytest.fixture(autouse=True)
def _bounds(settings):
    settings.AGENT_MAX_DOCUMENTS = 4
    settings.AGENT_MAX_DOCUMENT_BYTES = 5 * 1024 * 1024
    settings.AGENT_DOCUMENT_FETCH_TIMEOUT_S = 5.0
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False
    settings.AGENT_RATE_LIMIT = "100000/m"


# --- stored once, referenced everywhere ----------------------------------------------------------------------------


def test_a_pdf_and_a_text_file_are_stored_and_the_run_shows_their_references(api, alice):
    response = api.post(RUNS, {"input": [text(), pdf(), notes()]}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    given = [
        text(),
        reference(PDF, "application/pdf", "report.pdf"),
        reference(TEXT, "text/plain", "notes.txt"),
    ]
    assert body["input"] == given
    assert api.get(run_url(body["id"])).json()["input"] == given
    assert api.get(RUNS).json()["results"][0]["input"] == given
    run = Run.objects.get(pk=body["id"])
    assert (run.input, run.input_parts) == (ARITHMETIC, given)  # the bytes are the documents', not the run's
    assert b64(PDF) not in json.dumps(body) and b64(PDF) not in json.dumps(run.input_parts)
    assert bytes(stored(PDF, "application/pdf").data) == PDF
    assert (stored(TEXT, "text/plain").owner, stored(TEXT, "text/plain").size) == (alice, len(TEXT))


def test_the_demo_model_names_each_document_and_reads_a_text_ones_first_line(api):
    body = api.post(RUNS, {"input": [text(), pdf(), notes()]}, format="json").json()
    assert (body["stop_reason"], body["output"]) == (
        "final_answer",
        f"I was given 2 documents (report.pdf, application/pdf, {len(PDF)} bytes; notes.txt, text/plain, "
        f'{len(TEXT)} bytes, which begins "What is 12*7, plus 1?"). 85',
    )


def test_a_document_without_a_name_is_named_by_its_type(api):
    body = api.post(
        RUNS, {"input": [text(), pdf(name=None), notes(name=None, media_type="text/markdown")]}, format="json"
    )
    assert [p.get("name") for p in body.json()["input"]] == [None, "document.pdf", "document.md"]


def test_the_same_document_given_twice_is_stored_once(api, alice):
    first = api.post(RUNS, {"input": [text(), pdf(), pdf(name="again.pdf")]}, format="json").json()
    second = api.post(RUNS, {"input": [text(), pdf(name="copy.pdf")]}, format="json").json()
    assert Document.objects.count() == 1
    ids = {p["document"] for p in first["input"][1:] + second["input"][1:]}
    assert ids == {str(stored(PDF, "application/pdf").pk)}
    assert [p["name"] for p in first["input"][1:] + second["input"][1:]] == ["report.pdf", "again.pdf", "copy.pdf"]


def test_each_owner_has_their_own_copy_and_reads_only_their_own(api, alice):
    mine = api.post(RUNS, {"input": [text(), notes()]}, format="json").json()["input"][1]
    other = make_user("mallory")
    theirs = client_for(other).post(RUNS, {"input": [text(), notes()]}, format="json").json()["input"][1]
    assert mine["document"] != theirs["document"] and Document.objects.count() == 2
    # A model call loads a reference only from its run's owner's documents: another's id is a note, not its bytes.
    asked = [{"role": "user", "content": [text(), mine]}]
    assert documents.loaded(other.pk, asked)[0]["content"][1] == {
        "type": "text",
        "text": "(A document was here: notes.txt; it is no longer stored.)",
    }
    assert documents.loaded(alice.pk, asked)[0]["content"][1] == {
        "type": "file",
        "data": b64(TEXT),
        "media_type": "text/plain",
        "name": "notes.txt",
    }


def test_the_seed_endpoint_takes_documents(api):
    response = api.post(SEED, {"input": [text(), notes()]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["output"].startswith("I was given 1 document (notes.txt, text/plain")
    assert Run.objects.get().input_parts[1] == reference(TEXT, "text/plain", "notes.txt")


def test_documents_need_no_images(api, settings):
    settings.AGENT_MAX_IMAGES = 0  # the list form stays on for documents
    assert api.post(RUNS, {"input": [text(), notes()]}, format="json").status_code == 201
    image = {"type": "image", "data": b64(PNG), "media_type": "image/png"}
    assert refused(api, [text(), image]) == ["At most 0 images per input (1 given)."]


def test_a_text_documents_personal_data_is_redacted_before_it_is_stored(api):
    secret = b"Mail me at jane.doe@example.com about it.\n"
    response = api.post(RUNS, {"input": [text(), notes(secret)], "guardrails": [{"type": "pii"}]}, format="json")
    assert response.status_code == 201, response.content
    kept = bytes(Document.objects.get().data)
    assert b"jane.doe@example.com" not in kept and kept.startswith(b"Mail me at ")


# --- refused before anything is stored -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("part", "message"),
    [
        (
            {"type": "file", "data": "not_base64!", "media_type": "application/pdf"},
            "part 2: data is not valid base64.",
        ),
        (pdf(TEXT), "part 2: media_type says application/pdf, but the bytes are not a PDF."),
        (notes(b"\xff\xfe\x00bad"), "part 2: media_type says text/plain, but the bytes are not UTF-8 text."),
        (notes(b"  \n"), "part 2: the document's text is blank."),
        (notes(b"a\x00b"), "part 2: a text document may not hold a NUL character."),
        (
            {"type": "file", "data": b64(PDF), "media_type": "application/zip"},
            "part 2: media_type 'application/zip' is not supported for a document: it must be one of "
            "application/pdf, text/plain, text/markdown, text/csv.",
        ),
        (
            {"type": "file", "data": b64(PDF)},
            "part 2: data needs a media_type: one of application/pdf, text/plain, text/markdown, text/csv.",
        ),
        ({"type": "file"}, "part 2: a document needs a url, or data with media_type."),
        (
            {**pdf(), "url": "https://93.184.215.14/a.pdf"},
            "part 2: a document has a url or data, not both.",
        ),
        (
            {**pdf(), "title": "x"},
            "part 2: unknown field 'title': a document part has url, or data and media_type; and a name if you like.",
        ),
        (pdf(name=5), "part 2: name must be a string, got a number."),
        (pdf(name="a\nb"), "part 2: name must be 1 to 200 printable characters, not blank."),
        (pdf(name="x" * 201), "part 2: name must be 1 to 200 printable characters, not blank."),
        (
            {"type": "file", "url": "ftp://93.184.215.14/a.pdf"},
            "part 2: a document url must be https:// or http:// (send other documents as base64 data with media_type).",
        ),
        ({"type": "file", "url": 5}, "part 2: url must be a string, got a number."),
    ],
)
def test_a_bad_document_is_a_400_naming_it_and_nothing_is_stored(api, part, message):
    assert refused(api, [text(), part]) == [message]


def test_too_many_documents_are_refused(api, settings):
    settings.AGENT_MAX_DOCUMENTS = 2
    assert refused(api, [text(), pdf(), notes(), notes(b"third")]) == ["At most 2 documents per input (3 given)."]
    assert api.post(RUNS, {"input": [text(), pdf(), notes()]}, format="json").status_code == 201


def test_a_document_over_the_size_bound_is_refused(api, settings):
    settings.AGENT_MAX_DOCUMENT_BYTES = 40
    assert refused(api, [text(), pdf()]) == [
        f"part 2: the document is {len(PDF)} bytes once decoded; at most 40 bytes."
    ]
    settings.AGENT_MAX_DOCUMENT_BYTES = len(PDF) - 1  # its base64 fits the quick check; the decoded bytes tell
    assert refused(api, [pdf()]) == [
        f"part 1: the document is {len(PDF)} bytes once decoded; at most {len(PDF) - 1} bytes."
    ]
    settings.AGENT_MAX_DOCUMENT_BYTES = len(PDF)
    assert api.post(RUNS, {"input": [pdf()]}, format="json").status_code == 201


def test_with_documents_off_a_document_is_refused(api, settings):
    settings.AGENT_MAX_DOCUMENTS = 0
    assert refused(api, [text(), pdf()]) == ["At most 0 documents per input (1 given)."]


def test_a_model_that_takes_no_documents_is_a_400_before_anything_is_stored(api, settings):
    settings.AGENT_DOCUMENT_MODELS = {**settings.AGENT_DOCUMENT_MODELS, "demo": ["demo-reader"]}
    assert refused(api, [text(), pdf()]) == [
        "Model 'demo-1' of provider 'demo' does not take documents; choose a model that does, or send the input as "
        "text."
    ]


# --- by URL, through the guard ---------------------------------------------------------------------------------


def by_url(url: str, name: str | None = None) -> dict:
    return {"type": "file", "url": url, **({"name": name} if name else {})}


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:9/report.pdf", "a loopback address"),
        ("https://10.1.2.3/report.pdf", "a private address"),
        ("https://169.254.169.254/latest/meta-data", "a cloud metadata address"),
    ],
)
def test_a_url_to_a_private_address_is_refused_like_a_webhook(api, url, kind):
    (message,) = refused(api, [text(), by_url(url)])
    assert message.startswith("part 2: ") and kind in message
    assert message.endswith("document URLs may only go to public addresses.")


def test_a_url_on_this_machine_is_never_fetched_while_private_addresses_are_refused(api, stub):
    stub.add("GET", "/report.pdf", body=PDF, headers={"Content-Type": "application/pdf"}, repeat=True)
    (message,) = refused(api, [text(), by_url(f"{stub.url}/report.pdf")])
    assert "127.0.0.1, a loopback address" in message
    assert stub.count("GET", "/report.pdf") == 0


def test_a_name_that_resolves_to_a_private_address_is_refused(api, resolver):
    resolver["inside.example.test"] = ["10.20.30.40"]
    assert refused(api, [by_url("https://inside.example.test/a.pdf")]) == [
        "part 1: inside.example.test resolves to 10.20.30.40, a private address: document URLs may only go to "
        "public addresses."
    ]


@pytest.fixture
def reachable(settings, stub):
    """The guard's test hook: with AGENT_WEBHOOK_ALLOW_PRIVATE, the stub on 127.0.0.1 stands for a public host (cloud
    metadata stays refused)."""
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = True
    return stub


def test_a_public_url_is_fetched_stored_and_referenced(api, reachable):
    reachable.add("GET", "/files/Q3%20report.pdf", body=PDF, headers={"Content-Type": "application/pdf"})
    reachable.add("GET", "/notes", body=TEXT, headers={"Content-Type": "text/plain; charset=utf-8"})
    parts = [text(), by_url(f"{reachable.url}/files/Q3%20report.pdf"), by_url(f"{reachable.url}/notes", "n.txt")]
    response = api.post(RUNS, {"input": parts}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["input"][1:] == [
        reference(PDF, "application/pdf", "Q3 report.pdf"),  # named by the URL's last segment
        reference(TEXT, "text/plain", "n.txt"),
    ]
    assert reachable.count("GET", "/files/Q3%20report.pdf") == 1 and reachable.count("GET", "/notes") == 1
    fetched = reachable.requests[0]
    assert "authorization" not in fetched.headers and fetched.headers["user-agent"].startswith("reactsite-documents/")
    assert response.json()["output"].startswith("I was given 2 documents (Q3 report.pdf, application/pdf")


def test_a_fetched_text_in_another_charset_is_stored_as_utf8(api, reachable):
    reachable.add(
        "GET",
        "/latin.txt",
        body="Café 12*7\n".encode("latin-1"),
        headers={"Content-Type": "text/plain; charset=iso-8859-1"},
    )
    response = api.post(RUNS, {"input": [text(), by_url(f"{reachable.url}/latin.txt")]}, format="json")
    assert response.status_code == 201, response.content
    assert bytes(Document.objects.get().data) == "Café 12*7\n".encode()


def test_a_pdf_served_as_octet_stream_is_known_by_its_bytes(api, reachable):
    reachable.add("GET", "/blob", body=PDF, headers={"Content-Type": "application/octet-stream"})
    response = api.post(RUNS, {"input": [text(), by_url(f"{reachable.url}/blob")]}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["input"][1]["media_type"] == "application/pdf"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ({"status": 404, "body": b"gone"}, "part 2: the URL answered 404, not 200."),
        (
            {"status": 302, "headers": {"Location": "http://169.254.169.254/"}},
            "part 2: the URL answered 302, not 200 (redirects are not followed).",
        ),
        (
            {"body": b"<html>hi</html>", "headers": {"Content-Type": "text/html"}},
            "part 2: the URL answered with Content-Type 'text/html': a document is one of application/pdf, "
            "text/plain, text/markdown, text/csv.",
        ),
        (
            {"body": TEXT, "headers": {"Content-Type": "application/pdf"}},
            "part 2: media_type says application/pdf, but the bytes are not a PDF.",
        ),
        (
            {"body": PDF + bytes(100), "headers": {"Content-Type": "application/pdf"}},
            f"part 2: the URL's content is {len(PDF) + 100} bytes; at most {len(PDF)}.",
        ),
        (
            {"body": PDF, "headers": {"Content-Type": "application/pdf"}, "delay_s": 1.0},
            "part 2: the URL did not answer within 0.3 s.",
        ),
    ],
)
def test_what_a_url_answers_is_checked_and_a_bad_answer_stores_nothing(api, reachable, settings, script, message):
    settings.AGENT_MAX_DOCUMENT_BYTES = len(PDF)
    settings.AGENT_DOCUMENT_FETCH_TIMEOUT_S = 0.3
    reachable.add("GET", "/doc", **script)
    assert refused(api, [text(), by_url(f"{reachable.url}/doc")]) == [message]
    assert reachable.count("GET", "/doc") == 1


def test_a_body_longer_than_it_says_is_cut_at_the_bound(api, reachable, settings):
    """No Content-Length to trust: the read stops one chunk past the bound."""
    settings.AGENT_MAX_DOCUMENT_BYTES = 1000

    def chunked(_request):
        return 200, {"Content-Type": "application/pdf"}, [PDF, bytes(4096)]

    reachable.add("GET", "/big", handler=chunked)
    assert refused(api, [text(), by_url(f"{reachable.url}/big")]) == ["part 2: the URL's content is over 1000 bytes."]


# --- threads: references, never copies ---------------------------------------------------------------------------


def test_a_threads_later_run_references_its_documents_and_images_not_copies(api):
    thread = api.post(THREADS, {}, format="json").json()["id"]
    image = {"type": "image", "data": b64(PNG), "media_type": "image/png"}
    first = api.post(RUNS, {"input": [text(), pdf(), image], "thread_id": thread}, format="json")
    assert first.status_code == 201, first.content
    second = api.post(RUNS, {"input": "and add 2", "thread_id": thread}, format="json").json()
    history = Run.objects.get(pk=second["id"]).history
    png = stored(PNG, "image/png")
    assert history[0]["input_parts"] == [
        text(),
        reference(PDF, "application/pdf", "report.pdf"),
        {"type": "image", "document": str(png.pk), "media_type": "image/png", "size": len(PNG)},
    ]
    assert b64(PDF) not in json.dumps(history) and b64(PNG) not in json.dumps(history)
    third = api.post(RUNS, {"input": "and add 3", "thread_id": thread}, format="json").json()
    assert Run.objects.get(pk=third["id"]).history[0]["input_parts"] == history[0]["input_parts"]
    assert Document.objects.count() == 2  # the document and the image, each stored once


def test_a_threads_documents_stay_within_the_bound_newest_first(api, settings):
    settings.AGENT_MAX_DOCUMENTS = 2
    thread = api.post(THREADS, {}, format="json").json()["id"]
    api.post(RUNS, {"input": [text(), pdf()], "thread_id": thread}, format="json")
    api.post(RUNS, {"input": [text(), notes()], "thread_id": thread}, format="json")
    last = api.post(RUNS, {"input": [text(), notes(b"new", "new.txt")], "thread_id": thread}, format="json").json()
    history = Run.objects.get(pk=last["id"]).history
    assert history[0]["input_parts"][1] == {
        "type": "text",
        "text": "(A document was here: report.pdf; it is not shown again.)",
    }
    assert history[1]["input_parts"][1] == reference(TEXT, "text/plain", "notes.txt")


def test_a_model_that_takes_no_documents_gets_notes_for_a_threads_documents(api, settings):
    thread = api.post(THREADS, {}, format="json").json()["id"]
    api.post(RUNS, {"input": [text(), pdf()], "thread_id": thread}, format="json")
    settings.AGENT_DOCUMENT_MODELS = {**settings.AGENT_DOCUMENT_MODELS, "demo": ["demo-reader"]}
    later = api.post(RUNS, {"input": "and add 2", "thread_id": thread}, format="json").json()
    assert later["status"] == "done"
    (turn,) = Run.objects.get(pk=later["id"]).history
    assert turn["input_parts"] == [
        text(),
        {"type": "text", "text": "(A document was here: report.pdf; it is not shown again.)"},
    ]


def test_a_reviewers_fork_takes_its_own_copy_of_the_documents(api, reviewer):
    original = api.post(RUNS, {"input": [text(), notes()]}, format="json").json()
    response = client_for(reviewer).post(run_url(original["id"], "fork"), {"from_step": 1}, format="json")
    assert response.status_code == 201, response.content
    fork = response.json()
    assert fork["input"][1] == reference(TEXT, "text/plain", "notes.txt", owner=reviewer)
    assert fork["input"][1]["document"] != original["input"][1]["document"]
    assert fork["output"].startswith("I was given 1 document (notes.txt, text/plain")  # its model read its copy


# --- the body's bound, per route ----------------------------------------------------------------------------------


def test_a_runs_creation_takes_a_larger_body_than_other_routes(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    settings.AGENT_MAX_RUN_BODY_BYTES = 20000
    big = notes(b"What is 12*7, plus 1?\n" + b"x" * 6000)
    response = api.post(RUNS, {"input": [text(), big]}, format="json")
    assert response.status_code == 201, response.content
    elsewhere = api.post(
        "/api/v1/tools/calculator/invoke", {"arguments": {"expression": "1+" * 2000 + "1"}}, format="json"
    )
    assert (elsewhere.status_code, elsewhere.json()) == (413, {"detail": "The request body is larger than 2000 bytes."})


def test_a_run_body_over_its_bound_is_a_413_and_nothing_is_stored(api, settings):
    settings.AGENT_MAX_RUN_BODY_BYTES = 5000
    before = counts()
    for url in (RUNS, SEED):
        response = api.post(url, {"input": [text(), notes(b"x" * 6000)]}, format="json")
        assert (response.status_code, response.json()) == (
            413,
            {"detail": "The request body is larger than 5000 bytes."},
        )
    assert counts() == before


# --- the served schema says the same ------------------------------------------------------------------------------


def test_the_schema_describes_the_document_parts_a_run_takes_and_shows(api):
    document = api.get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    schemas = document["components"]["schemas"]
    given = [text(), pdf(), notes(), {"type": "file", "url": "https://93.184.215.14/a.pdf", "name": "a.pdf"}]
    part = {"components": {"schemas": schemas}, **schemas["RunCreate"]["properties"]["input"]["oneOf"][1]["items"]}
    for each in given:
        jsonschema.validate(each, part)
    for bad in (
        {"type": "file", "data": b64(PDF), "media_type": "application/zip"},
        {"type": "file", "url": "ftp://x"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, part)
    answered = api.post(RUNS, {"input": given[:3]}, format="json").json()["input"]
    shown = schemas["Run"]["properties"]["input"]["oneOf"][1]
    jsonschema.validate(answered, {"components": {"schemas": schemas}, **shown})
    with pytest.raises(jsonschema.ValidationError):  # the run never shows a document's bytes
        jsonschema.validate(given[:2], {"components": {"schemas": schemas}, **shown})


# --- docs/documents.md's tour works as written ------------------------------------------------------------------


def test_the_pages_tour_answers_what_it_says(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"
    steps = tour(PAGE)
    assert len(steps) == 4 and all(command.startswith("api runs -d ") for command, _ in steps)
    client = client_for(make_user("admin", staff=True, superuser=True))
    answers = []
    for command, said in steps:
        response = send(client, command)
        assert response.status_code == int(said[:3]), (command, response.content[:400])
        answers.append(response.json())
        if response.status_code == 400:
            assert response.json() == json.loads(said[4:]), said
    first, second = answers[0], answers[1]
    assert first["stop_reason"] == "final_answer"
    assert first["output"] == re.search(r"output: (.*)", steps[0][1]).group(1)
    shown = json.loads(re.search(r'"input": (\[.*\])', steps[0][1]).group(1).replace("…", "").replace(", }", "}"))
    assert first["input"][1] == {**shown[1], "document": first["input"][1]["document"]}
    assert second["input"][0]["document"] == first["input"][1]["document"] and Document.objects.count() == 1
