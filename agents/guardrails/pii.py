"""Personal data in text: e-mail addresses, phone numbers, card numbers (Luhn checksum) and IBANs (ISO 13616 mod-97).

Each kind is a cheap candidate pattern, linear on any text, and a check in Python that throws out what only looks
like one: a card number whose checksum fails, a date or a decimal number shaped like a phone number. Cards and IBANs
are looked for before phones, so their digits are never taken for one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

KINDS = ("email", "phone", "card", "iban")
ORDER = ("email", "card", "iban", "phone")  # the order they are looked for in, whatever order a guardrail names them

EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}(?![\w-])")
CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])")
IBAN = re.compile(r"(?<!\w)[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,4})?(?!\w)")
# A run of digits with spaces, dots, dashes or an area code in parentheses, optionally after a "+country" prefix.
PHONE = re.compile(r"(?<![\w+.-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d[\d .-]{4,22}\d(?!\w|[.-]\d)")
_GROUPS = re.compile(r"[ .()-]+")
_DATE = re.compile(r"\d{4}([.-])\d{1,2}\1\d{1,2}|\d{1,2}([.-])\d{1,2}\2(?:\d{2}|\d{4})")
_IP = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


def luhn(digits: str) -> bool:
    """Whether a string of digits passes the Luhn checksum (every card number does)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return bool(digits) and total % 10 == 0


def card_number(text: str) -> bool:
    """Whether `text` (digits with spaces or dashes) is a card number: 13 to 19 digits that pass the Luhn check."""
    digits = re.sub(r"\D", "", text)
    return 13 <= len(digits) <= 19 and luhn(digits)


def iban(text: str) -> bool:
    """Whether `text` is an IBAN: 15 to 34 letters and digits (spaces aside), two letters, two check digits, and the
    ISO 13616 check: with its first four characters moved to the end and letters as numbers (A=10 … Z=35), mod 97
    is 1."""
    compact = text.replace(" ", "").upper()
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


# kind -> (candidates, the check that keeps a real one)
DETECTORS: dict[str, tuple[re.Pattern[str], Callable[[str], bool]]] = {
    "email": (EMAIL, lambda text: True),
    "card": (CARD, card_number),
    "iban": (IBAN, iban),
    "phone": (PHONE, phone),
}


def redact(text: str, kinds: tuple[str, ...]) -> str:
    """`text` with each piece of personal data of `kinds` replaced by its kind in brackets: `[email]`, `[phone]`…"""
    for kind in ORDER:
        if kind in kinds:
            text = _replaced(text, kind)
    return text


def _replaced(text: str, kind: str) -> str:
    pattern, real = DETECTORS[kind]

    def replacement(match: re.Match[str]) -> str:
        return f"[{kind}]" if real(match.group(0)) else match.group(0)

    return pattern.sub(replacement, text)


def found(text: str, kinds: tuple[str, ...]) -> list[str]:
    """The kinds of personal data in `text` (in KINDS order), without saying where or what."""
    seen: list[str] = []
    for kind in ORDER:
        if kind in kinds:
            pattern, real = DETECTORS[kind]
            if any(real(m.group(0)) for m in pattern.finditer(text)):
                seen.append(kind)
                text = redact(text, (kind,))  # its digits are no other kind's (a card is not a phone)
    return [kind for kind in KINDS if kind in seen]
