"""Personal data in text: e-mail addresses, phone numbers, card numbers (Luhn checksum) and IBANs (ISO 13616 mod-97).

Each kind is a cheap candidate pattern, linear on any text, and a check in Python that throws out what only looks
like one: a card number whose checksum fails, a date or a decimal number shaped like a phone number. IBANs are looked
for before cards (an IBAN's digits may pass a card's checksum), and both before phones, so their digits are never
taken for another kind.

The patterns read the text as a reader sees it (agents/guardrails/normalise.py: fullwidth digits, no-break spaces,
zero-width characters and look-alike letters folded away); redaction replaces the span of the text as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agents.guardrails.normalise import Normalised, normalise

KINDS = ("email", "phone", "card", "iban")
ORDER = ("email", "iban", "card", "phone")  # the order they are looked for in, whatever order a guardrail names them

# Between groups of digits: a space (no-break spaces read as one), a dot, a hyphen, an en or an em dash (the other
# hyphen look-alikes read as a hyphen).
DASHES = r"\-\u2013\u2014"
SEP = rf"[ .{DASHES}]"
EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}(?![\w-])")
# 13 to 19 digits, together or with a space or a dash between any two (4111 1111 1111 1111, 3782 822463 10005), or
# in groups of 3 to 6 with a dot between (4111.1111.1111.1111); not part of a decimal or dotted number (1.2.3.4).
CARD = re.compile(
    rf"(?<![\w{DASHES}])(?<!\d\.)(?:(?:\d[ {DASHES}]?){{12,18}}\d|\d{{4,6}}\.\d{{3,6}}(?:\.\d{{3,6}}){{1,4}})"
    rf"(?![\w{DASHES}]|\.\d)"
)
# Two letters, two check digits, then letters and digits: together, or in groups of 4 with one separator throughout.
IBAN = re.compile(
    rf"(?<!\w)[A-Za-z]{{2}}\d{{2}}(?:[A-Za-z0-9]{{11,30}}|(?P<sep>[ {DASHES}])[A-Za-z0-9]{{4}}"
    r"(?:(?P=sep)[A-Za-z0-9]{4}){1,6}(?:(?P=sep)[A-Za-z0-9]{1,4})?)(?!\w)"
)
# A run of digits with spaces, dots, dashes or an area code in parentheses, optionally after a "+country" prefix.
PHONE = re.compile(
    rf"(?<![\w+.{DASHES}])(?:\+\d{{1,3}}{SEP}?)?(?:\(\d{{1,5}}\){SEP}?)?\d[\d .{DASHES}]{{4,22}}\d"
    rf"(?!\w|[.{DASHES}]\d)"
)
_GROUPS = re.compile(rf"[ .(){DASHES}]+")
_DATE = re.compile(rf"\d{{4}}([.{DASHES}])\d{{1,2}}\1\d{{1,2}}|\d{{1,2}}([.{DASHES}])\d{{1,2}}\2(?:\d{{2}}|\d{{4}})")
_IP = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_IBAN_SEPARATORS = re.compile(rf"[ {DASHES}]")
_LAST_GROUP = re.compile(rf"{SEP}([^ .{DASHES}]{{1,4}})$")


def luhn(digits: str) -> bool:
    """Whether a string of digits passes the Luhn checksum (every card number does)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return bool(digits) and total % 10 == 0


def card_number(text: str) -> bool:
    """Whether `text` (digits, grouped or not) is a card number: 13 to 19 digits that pass the Luhn check."""
    digits = re.sub(r"\D", "", text)
    return 13 <= len(digits) <= 19 and luhn(digits)


def iban(text: str) -> bool:
    """Whether `text` is an IBAN: 15 to 34 letters and digits (separators aside), two letters, two check digits, and the
    ISO 13616 check: with its first four characters moved to the end and letters as numbers (A=10 … Z=35), mod 97
    is 1."""
    compact = _IBAN_SEPARATORS.sub("", text).upper()
    if not 15 <= len(compact) <= 34 or not compact[:2].isalpha() or not compact[2:4].isdigit():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def phone(text: str) -> bool:
    """Whether a PHONE candidate is a phone number: 7 to 15 digits, written with a "+country" prefix or in groups
    (a bare run of digits is more often an order number or an amount); not a date, an IP address, a decimal number,
    a range of years, nor a card number."""
    digits = re.sub(r"\D", "", text)
    if not 7 <= len(digits) <= 15 or card_number(text):
        return False
    groups = [g for g in _GROUPS.split(text.lstrip("+ ")) if g]
    if text.startswith("+"):
        return True
    if len(groups) < 2 or _DATE.fullmatch(text) or _IP.fullmatch(text):
        return False
    if set(re.sub(r"\d", "", text)) == {"."} and len(groups) == 2:  # 1234567.89
        return False
    return not (len(groups) == 2 and all(len(g) == 4 and g[0] in "12" for g in groups))  # 1990-2020


# kind -> (candidates, the check that keeps a real one, how many last groups of a candidate may be left out)
DETECTORS: dict[str, tuple[re.Pattern[str], Callable[[str], bool], int]] = {
    "email": (EMAIL, lambda text: True, 0),
    "card": (CARD, card_number, 1),  # its security code after it; more would take a row of numbers for one
    "iban": (IBAN, iban, 6),  # the words after it (its check is 97 times more selective than a card's)
    "phone": (PHONE, phone, 0),
}


def redact(text: str | Normalised, kinds: tuple[str, ...]) -> str:
    """The text as written with each piece of personal data of `kinds` replaced by its kind in brackets: `[email]`,
    `[phone]`… Only the characters of each piece are replaced (its disguises with it: a zero-width space inside an
    e-mail address, fullwidth digits); the rest of the text is left exactly as it was."""
    read = text if isinstance(text, Normalised) else normalise(text)
    written = sorted((read.span(start, end), kind) for start, end, kind in _spans(read.text, kinds))
    pieces: list[str] = []
    done = 0
    for (start, end), kind in written:
        if start < done:  # two pieces read from one character ("⑴" reads "(1)"): it is replaced once
            continue
        pieces += [read.original[done:start], f"[{kind}]"]
        done = end
    if not pieces:
        return read.original
    pieces.append(read.original[done:])
    return "".join(pieces)


def found(text: str | Normalised, kinds: tuple[str, ...]) -> list[str]:
    """The kinds of personal data in `text` (in KINDS order), without saying where or what."""
    read = text if isinstance(text, Normalised) else normalise(text)
    seen = {kind for _, _, kind in _spans(read.text, kinds)}
    return [kind for kind in KINDS if kind in seen]


def _spans(text: str, kinds: tuple[str, ...]) -> list[tuple[int, int, str]]:
    """Where each piece of personal data of `kinds` is in `text` (start, end, kind), kind by kind in ORDER; a piece
    found is blanked out before the next kind is looked for (a card's digits are no phone number)."""
    spans: list[tuple[int, int, str]] = []
    for kind in ORDER:
        if kind not in kinds:
            continue
        pattern, real, trims = DETECTORS[kind]
        hits = [
            (m.start(), m.start() + length)
            for m in pattern.finditer(text)
            if (length := _real(m.group(0), real, trims))
        ]
        if hits:
            spans += [(start, end, kind) for start, end in hits]
            text = _blanked(text, hits)
    return spans


def _real(candidate: str, real: Callable[[str], bool], trims: int) -> int:
    """How much of a candidate is real: all of it; or, when it is written in groups of 3 or more, all but up to
    `trims` last groups of 1 to 4 (a card number followed by its security code, an IBAN by short words); else 0."""
    for _ in range(trims + 1):
        if real(candidate):
            return len(candidate)
        last = _LAST_GROUP.search(candidate)
        if last is None:
            return 0
        candidate = candidate[: last.start()]
        if any(len(group) < 3 for group in _GROUPS.split(candidate)):
            return 0
    return 0


def _blanked(text: str, hits: list[tuple[int, int]]) -> str:
    """`text` with each span of `hits` (in order, apart) blanked by as many NULs: the offsets of the rest still hold."""
    pieces: list[str] = []
    done = 0
    for start, end in hits:
        pieces += [text[done:start], "\x00" * (end - start)]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)
