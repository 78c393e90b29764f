"""Guardrails read text as a reader sees it (agents/guardrails/normalise.py): a word or a piece of personal data in
disguise (look-alike letters, invisible characters, fullwidth or mathematical letters, other separators) trips the
regex and pii guardrails on every stage, and redaction replaces exactly the disguised characters."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import assume, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from agents.guardrails import guard_for, pii, rails
from agents.guardrails.normalise import normalise, reading
from agents.models import Run
from tests.api.conftest import run_url
from tests.conftest import client_for
from tests.guardrails.test_runs import openai_run, run, stopped_by
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

ALL = pii.KINDS
STAGES = ("input", "output", "tool_output", "tool_arguments")
DENY = {"type": "regex", "name": "secrets", "patterns": ["(?i)password"]}

# Each reads "password" (or "PASSWORD"); none is matched by (?i)password as written.
PASSWORDS = {
    "cyrillic a": "p\u0430ssword",
    "cyrillic r and a": "\u0440\u0430ssword",
    "cyrillic o": "passw\u043erd",
    "cyrillic dze": "pa\u0455\u0455word",
    "cyrillic capitals": "P\u0410SSW\u041eRD",
    "greek omicron": "passw\u03bfrd",
    "zero-width space": "pass\u200bword",
    "zero-width joiner": "pass\u200dword",
    "zero-width non-joiner": "pass\u200cword",
    "word joiner": "pass\u2060word",
    "soft hyphen": "pass\u00adword",
    "byte order mark": "pass\ufeffword",
    "right-to-left override": "pass\u202eword\u202c",
    "left-to-right isolate": "pass\u2066word\u2069",
    "mongolian vowel separator": "pass\u180eword",
    "variation selector": "pas\ufe0fsword",
    "tag character": "pass\U000e0020word",
    "several invisible ones": "p\u200ba\u00ads\u2060s\u200dw\ufeffo\u200cr\u2060d",
    "combining accent": "pa\u0301ssword",
    "precomposed accent": "p\u00e1ssw\u00f6rd",
    "fullwidth": "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44",
    "mathematical bold": "\U0001d429\U0001d41a\U0001d42c\U0001d42c\U0001d430\U0001d428\U0001d42b\U0001d41d",
    "mathematical script": "\U0001d4c5\U0001d4b6\U0001d4c8\U0001d4c8\U0001d4cc\u2134\U0001d4c7\U0001d4b9",
    "mathematical sans-serif": "\U0001d5c9\U0001d5ba\U0001d5cc\U0001d5cc\U0001d5d0\U0001d5c8\U0001d5cb\U0001d5bd",
    "mathematical double-struck": "\U0001d561\U0001d552\U0001d564\U0001d564\U0001d568\U0001d560\U0001d563\U0001d555",
    "mathematical monospace": "\U0001d699\U0001d68a\U0001d69c\U0001d69c\U0001d6a0\U0001d698\U0001d69b\U0001d68d",
    "circled letters": "\u24df\u24d0\u24e2\u24e2\u24e6\u24de\u24e1\u24d3",
    "superscript letters": "\u1d56\u1d43\u02e2\u02e2\u02b7\u1d52\u02b3\u1d48",
    "small capitals": "\u1d18\u1d00ss\u1d21\u1d0f\u0280\u1d05",
    "mixed": "\uff50\u0430\u200bs\U0001d42c\u0301w\u03bfrd",
}

# kind -> disguises of one piece of personal data of that kind (each in the text as written)
CARD = "4111111111111111"
PERSONAL = {
    "card": [
        "4111 1111 1111 1111",
        "4111.1111.1111.1111",
        "4111-1111-1111-1111",
        "4111\u20131111\u20131111\u20131111",  # en dash
        "4111\u20141111\u20141111\u20141111",  # em dash
        "4111\u00a01111\u00a01111\u00a01111",  # no-break space
        "4111\u202f1111\u202f1111\u202f1111",  # narrow no-break space
        "4111\u30001111\u30001111\u30001111",  # ideographic space
        "\uff14\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11",  # fullwidth
        "\uff14\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11",
        "4111\u200b1111\u200b1111\u200b1111",  # zero-width spaces
        "41\u206011\u00ad1111\u200d11111111",  # invisible ones anywhere
        "\u0664\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661",  # Arabic
        "3782 822463 10005",  # American Express's grouping
    ],
    "iban": [
        "GB82 WEST 1234 5698 7654 32",
        "GB82-WEST-1234-5698-7654-32",
        "GB82\u2013WEST\u20131234\u20135698\u20137654\u201332",
        "GB82\u00a0WEST\u00a01234\u00a05698\u00a07654\u00a032",
        "GB82\u200bWEST12345698765432",
        "\uff27\uff22\uff18\uff12 \uff37\uff25\uff33\uff34 1234 5698 7654 32",  # fullwidth
        "GB82 W\u0415ST 1234 5698 7654 32",  # Cyrillic Е
        "BE68 5390 0754 7034",  # a length of whole groups: the words after it are no part of it
    ],
    "email": [
        "alice\uff20example.com",  # fullwidth @
        "alice\ufe6bexample.com",  # small @
        "ali\u200bce@example.com",
        "alice@exam\u200bple.com",
        "alice@\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com",
        "alice@ex\u0430mple.com",  # Cyrillic а in the domain
        "alice@example\u2024com",  # one dot leader
        "al\u00adice@exa\u2060mple.c\u200dom",
    ],
    "phone": [
        "+44\u00a020\u00a07946\u00a00958",
        "555\u2013123\u20134567",
        "\uff0b\uff14\uff14 \uff12\uff10 \uff17\uff19\uff14\uff16 \uff10\uff19\uff15\uff18",
        "+44 20\u200b7946 0958",
    ],
}
DISGUISED = [(kind, text) for kind, texts in PERSONAL.items() for text in texts]

# Ordinary text that must not trip: a deny pattern "(?i)password", and the pii guardrail.
PLAIN = [
    "The pass word is 'swordfish', and a passport is no pass to the manager's office.",
    "Version 1.2.3.4 shipped on 2026-12-06 (or 06.12.2026, 2026\u201312\u201306); it costs 12.50 EUR, 1,234.56 in all.",
    "Python 3.12.1, IP 192.168.100.200, port 8080, order 12345678, years 1990-2020, pi 3.1415926535897932.",
    "A number that fails its checksum: 4111.1111.1111.1112, 4111 1111 1111 1112; a decimal 0.4111111111111111.",
    "A dotted run around one: build 1.4111.1111.1111.1111 and 4111.1111.1111.1111.2.",
    "\u041f\u0440\u0438\u0432\u0435\u0442! \u0426\u0435\u043d\u0430 12,50 \u20bd \u2014 6 "
    "\u0434\u0435\u043a\u0430\u0431\u0440\u044f.",  # Russian: "Hi! The price is 12.50 ₽ — 6 December."
    "\u4fa1\u683c\u306f\uff11\uff12\uff0e\uff15\uff10\u30c9\u30eb\u3001"  # Japanese, fullwidth: a price, a date
    "\u65e5\u4ed8\u306f\uff12\uff10\uff12\uff16\uff0d\uff11\uff12\uff0d\uff10\uff16\u3002",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 \u201cquoted\u201d \u2026 \ufb01ne \u2460 \u00bd \U0001f642",
]


def guard(*guardrails):
    return guard_for(SimpleNamespace(guardrails=list(guardrails), deadline=None))


def check(g, stage: str, text: str):
    if stage == "tool_arguments":
        return g.check(stage, tool="search", arguments={"query": text})
    return g.check(stage, text, tool="search" if stage == "tool_output" else None)


# --- the normalisation -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("disguise", list(PASSWORDS.values()), ids=list(PASSWORDS))
def test_each_disguise_reads_as_the_word(disguise):
    assert disguise.lower() != "password"
    assert normalise(disguise).text.lower() == "password"


def test_ascii_text_is_its_own_reading_without_a_copy():
    text = "plain ASCII text, tabs\tand\nnew lines"
    read = normalise(text)
    assert read.text is text and read.original is text and not read.changed
    assert read.span(6, 11) == (6, 11)


@pytest.mark.parametrize(
    ("original", "read", "spans"),
    [
        ("p\u0430ss", "pass", [(0, 1), (1, 2), (2, 3), (3, 4)]),
        ("a\u200bb", "ab", [(0, 1), (2, 3)]),  # the invisible one belongs to neither
        ("e\u0301\u0302x", "ex", [(0, 3), (3, 4)]),  # combining marks go with their letter
        ("\ufb01\u2460", "fi1", [(0, 1), (0, 1), (1, 2)]),  # one character can read as several
        ("\U0001d429!", "p!", [(0, 1), (1, 2)]),  # a code point outside the BMP is one character
    ],
)
def test_each_character_read_maps_back_to_the_character_it_comes_from(original, read, spans):
    normalised = normalise(original)
    assert normalised.text == read
    assert [normalised.span(i, i + 1) for i in range(len(read))] == spans


@examples(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_the_map_back_covers_the_text_in_order(text):
    read = normalise(text)
    assert read.text == "".join(reading(ch) for ch in text)
    bounds = [read.span(i, i + 1) for i in range(len(read.text))]
    assert [start for start, _ in bounds] == sorted(start for start, _ in bounds)
    for index, (start, end) in enumerate(bounds):
        assert 0 <= start < end <= len(text)
        assert read.text[index] in "".join(reading(ch) for ch in text[start:end])


def test_the_text_is_read_once_per_check_whatever_the_number_of_rails(monkeypatch):
    calls = []
    monkeypatch.setattr(rails, "normalise", lambda text: calls.append(text) or normalise(text))
    g = guard(
        {"type": "regex", "name": "a", "patterns": ["nothing"]},
        {"type": "regex", "name": "b", "patterns": ["nor this"]},
        {"type": "pii", "action": "stop", "name": "c"},
    )
    assert g.check("output", "pl\u0430in text") is None
    assert calls == ["pl\u0430in text"]


# --- regex: every disguise trips on every stage ----------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("disguise", list(PASSWORDS.values()), ids=list(PASSWORDS))
def test_a_deny_pattern_sees_through_each_disguise(disguise, stage):
    assert "password" not in disguise.lower()  # as written, the pattern would not match
    verdict = check(guard(DENY), stage, f"my {disguise} is hunter2")
    assert verdict is not None and verdict.guardrail == "secrets"
    assert verdict.reason.endswith("deny pattern 1") and "hunter2" not in verdict.reason


def test_a_pattern_in_another_script_still_matches_the_text_as_written():
    """Cyrillic letters read as Latin ones ("пароль" reads "пapoль"): the text as written is matched too."""
    g = guard({"type": "regex", "patterns": ["\u043f\u0430\u0440\u043e\u043b\u044c"]})
    assert check(g, "input", "\u043c\u043e\u0439 \u043f\u0430\u0440\u043e\u043b\u044c: hunter2") is not None
    assert check(g, "input", "\u043c\u043e\u0439 \u043b\u043e\u0433\u0438\u043d") is None


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("text", PLAIN)
def test_ordinary_text_trips_neither_the_deny_pattern_nor_pii(text, stage):
    g = guard(DENY, {"type": "pii", "action": "stop", "on": list(STAGES)})
    assert check(g, stage, text) is None
    assert pii.redact(text, ALL) == text


def test_letters_spaced_out_are_not_the_word():
    """A space is a space: "pass word" and "p a s s w o r d" are out of reach of a pattern (docs/guardrails.md)."""
    assert check(guard(DENY), "input", "p a s s w o r d") is None
    assert check(guard(DENY), "input", "pass\u00a0word") is None  # a no-break space reads as a space


# --- pii: every disguise is found and redacted, on every stage -------------------------------------------------


@pytest.mark.parametrize(("kind", "disguise"), DISGUISED)
def test_personal_data_in_disguise_is_found_and_redacted(kind, disguise):
    text = f"Note: {disguise} from your bank."
    assert pii.found(text, ALL) == [kind]
    assert pii.redact(text, ALL) == f"Note: [{kind}] from your bank."


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(("kind", "disguise"), DISGUISED)
def test_a_pii_guardrail_that_stops_finds_each_disguise_on_every_stage(kind, disguise, stage):
    verdict = check(guard({"type": "pii", "action": "stop", "on": list(STAGES)}), stage, f"x {disguise} y")
    assert verdict is not None and verdict.reason == f"it contains personal data ({kind})"


@pytest.mark.parametrize("stage", ("input", "output", "tool_output"))
@pytest.mark.parametrize(("kind", "disguise"), DISGUISED)
def test_a_pii_guardrail_that_redacts_replaces_each_disguise_on_every_stage(kind, disguise, stage):
    assert guard({"type": "pii"}).redact(stage, f"x {disguise} y") == f"x [{kind}] y"


def test_redaction_replaces_exactly_the_disguised_span():
    assert pii.redact("mail ali\u200bce@example.com now", ALL) == "mail [email] now"
    # everything around the pieces stays as written, invisible and fullwidth characters included
    before, between, after = (
        "Gr\u00fc\u00dfe \uff46\uff52\uff4f\uff4d Zo\u00eb\u200b: \u200b",
        ", card ",
        " \u2014 \ufb01n\u200d!",
    )
    email = "ali\u200bce@ex\u0430mple.com"
    card = "\uff14\uff11\uff11\uff11\u00a0\uff11\uff11\uff11\uff11\u00a01111\u00a01111\u0301"  # its accent with it
    text = before + email + between + card + after
    assert pii.redact(text, ALL) == before + "[email]" + between + "[card]" + after


def test_a_card_followed_by_its_security_code_is_still_a_card():
    assert pii.redact("card 4111 1111 1111 1111 123, exp 12/26", ALL) == "card [card] 123, exp 12/26"


def test_an_ibans_digits_are_not_taken_for_a_card():
    """DE44 5001 0517 5407 3249 31: its digits after the country pass the Luhn check too."""
    assert pii.card_number("5001 0517 5407 3249 31")
    assert pii.redact("IBAN DE44 5001 0517 5407 3249 31.", ALL) == "IBAN [iban]."


# Letters, spaces, marks, invisible characters and punctuation, but none that reads as a digit or joins a number.
AROUND = st.text(
    st.characters(categories=("L", "Zs", "Mn", "Cf", "Po")).filter(
        lambda ch: not set(reading(ch)) & set("0123456789+-")
    ),
    max_size=20,
)


@examples(max_examples=100, deadline=None)
@given(AROUND, AROUND, st.sampled_from(DISGUISED))
def test_redaction_leaves_the_text_around_a_piece_as_it_was(before, after, piece):
    kind, disguise = piece
    assume(not pii.found(f"{before} {after}", ALL))
    assert pii.redact(f"{before} {disguise} {after}", ALL) == f"{before} [{kind}] {after}"


# --- end to end: runs through the API ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def openai(settings, stub):
    return llm.point_sdks_at(settings, stub, retries=0)


def stored(body: dict) -> str:
    return str(list(Run.objects.get(pk=body["id"]).steps.values_list("data", flat=True)))


@pytest.mark.django_db
@pytest.mark.parametrize("disguise", list(PASSWORDS.values()), ids=list(PASSWORDS))
def test_a_disguised_word_on_the_input_stops_the_run(api, disguise):
    body = run(api, f"What is 12*7? My {disguise} is hunter2", DENY)
    stopped_by(body, "secrets", "input", "the text matches deny pattern 1")
    assert body["turns"] == 0


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "disguise"), DISGUISED)
def test_disguised_personal_data_in_the_input_is_redacted_when_the_run_is_made(api, kind, disguise):
    body = run(api, f"What is 12*7? Remember {disguise}, please.", {"type": "pii"})
    assert body["input"] == f"What is 12*7? Remember [{kind}], please."
    assert disguise not in str(body) and disguise not in str(Run.objects.get(pk=body["id"]).input)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kind", "disguise"),
    [("email", "ali\u200bce@example.com"), ("card", "4111.1111.1111.1111"), ("iban", "GB82-WEST-1234-5698-7654-32")],
)
def test_disguised_personal_data_in_the_final_answer_is_redacted(api, openai, kind, disguise):
    openai.add("POST", OPENAI_PATH, json=llm.openai_text(f"Use {disguise} for Jane."))
    body = openai_run(api, {"type": "pii"})
    assert (body["stop_reason"], body["output"]) == ("final_answer", f"Use [{kind}] for Jane.")
    assert disguise not in stored(body)


@pytest.mark.django_db
def test_a_disguised_email_in_the_final_answer_stops_the_run(api, openai):
    openai.add("POST", OPENAI_PATH, json=llm.openai_text("Write to jane\u200b@example.com."))
    body = openai_run(api, {"type": "pii", "action": "stop", "name": "no-pii"})
    stopped_by(body, "no-pii", "output", "it contains personal data (email)")


@pytest.mark.django_db
def test_a_disguised_word_in_the_final_answer_stops_the_run(api, openai):
    openai.add("POST", OPENAI_PATH, json=llm.openai_text(f"Your {PASSWORDS['mixed']} is hunter2."))
    body = openai_run(api, {**DENY, "on": ["output"]})
    stopped_by(body, "secrets", "output", "the text matches deny pattern 1")


def searched(api, reviewer, stub, settings, abstract: str, *guardrails: dict) -> dict:
    """A demo run that searches (the search stub answers `abstract`), approved by a reviewer."""
    settings.TAVILY_API_KEY, settings.DUCKDUCKGO_URL = "", stub.url + "/"
    stub.add("GET", "/", json={"Heading": "Jane", "AbstractText": abstract})
    paused = run(api, "search for Jane Doe", *guardrails, tools=["search"])
    assert paused["status"] == "awaiting_approval"
    response = client_for(reviewer).post(run_url(paused["id"], "advance"), {"approval": True}, format="json")
    assert response.status_code == 200, response.content
    return api.get(run_url(paused["id"])).json()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kind", "disguise"),
    [
        ("email", "jane\uff20example.com"),
        ("card", "4111\u00a01111\u00a01111\u00a01111"),
        ("phone", "+44\u00a020\u00a07946\u00a00958"),
    ],
)
def test_disguised_personal_data_in_a_tools_output_is_redacted(api, reviewer, stub, settings, kind, disguise):
    body = searched(api, reviewer, stub, settings, f"Jane: {disguise}.", {"type": "pii"})
    tool = next(step for step in body["steps"] if step["kind"] == "tool")
    assert f"Jane: [{kind}]." in tool["output"]
    assert disguise not in stored(body) and disguise not in str(body)


@pytest.mark.django_db
def test_a_disguised_word_in_a_tools_output_withholds_it(api, reviewer, stub, settings):
    body = searched(
        api,
        reviewer,
        stub,
        settings,
        f"Jane's {PASSWORDS['zero-width space']} is hunter2.",
        {**DENY, "on": ["tool_output"]},
    )
    stopped_by(body, "secrets", "tool output", "the text matches deny pattern 1")
    assert "hunter2" not in stored(body)
