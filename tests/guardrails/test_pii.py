"""PII detection and redaction (agents/guardrails/pii.py): checksums, the shapes a phone number is told apart from."""

from __future__ import annotations

import pytest

from agents.guardrails import pii

ALL = pii.KINDS


@pytest.mark.parametrize(
    ("digits", "valid"),
    [
        ("4111111111111111", True),  # Visa's test number
        ("5555555555554444", True),  # Mastercard's
        ("378282246310005", True),  # American Express's (15 digits)
        ("4111111111111112", False),
        ("1234567812345678", False),
        ("", False),
    ],
)
def test_luhn(digits, valid):
    assert pii.luhn(digits) is valid


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("DE89 3704 0044 0532 0130 00", True),
        ("GB82WEST12345698765432", True),
        ("gb82 west 1234 5698 7654 32", True),  # written in lower case: the same IBAN
        ("NO9386011117947", True),  # the shortest country format (15)
        ("DE89 3704 0044 0532 0130 02", False),  # one digit off: mod 97 is not 1
        ("GB82WEST1234569876543", False),
        ("DE8X370400440532013000", False),
    ],
)
def test_iban_checksum(text, valid):
    assert pii.iban(text) is valid


@pytest.mark.parametrize(
    "text",
    ["+44 20 7946 0958", "+1 (555) 123-4567", "(555) 123 4567", "555-123-4567", "06 12 34 56 78", "+33612345678"],
)
def test_phone_numbers_are_found(text):
    assert pii.redact(f"Call {text} today.", ("phone",)) == "Call [phone] today."


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-15",  # dates
        "15.01.2024",
        "3.14159265",  # decimal numbers
        "1234567.89",
        "192.168.100.200",  # an IP address
        "1990-2020",  # a range of years
        "12345678",  # a bare run of digits: an order number, an amount
        "4111 1111 1111 1111",  # a card number (too many digits for a phone)
        "3782 822463 10005",  # a 15-digit card number (its checksum says card)
        "12 34",  # too few digits
    ],
)
def test_what_only_looks_like_a_phone_number_is_left(text):
    sentence = f"See {text} here."
    assert pii.redact(sentence, ("phone",)) == sentence
    assert pii.found(sentence, ("phone",)) == []


def test_each_kind_is_replaced_by_its_name_in_brackets():
    text = (
        "Write to jane.doe+news@mail.example.co.uk or call +1 (555) 123-4567; card 4111-1111-1111-1111, "
        "IBAN DE89 3704 0044 0532 0130 00. Ref 2024-01-15."
    )
    assert pii.redact(text, ALL) == ("Write to [email] or call [phone]; card [card], IBAN [iban]. Ref 2024-01-15.")
    assert pii.found(text, ALL) == ["email", "phone", "card", "iban"]


def test_numbers_that_fail_their_checksum_are_kept():
    text = "card 4111 1111 1111 1112, IBAN GB82WEST1234569876543X"
    assert pii.redact(text, ALL) == text
    assert pii.found(text, ALL) == []


def test_only_the_kinds_asked_for_are_redacted():
    text = "jane@example.com, 4111 1111 1111 1111"
    assert pii.redact(text, ("card",)) == "jane@example.com, [card]"
    assert pii.found(text, ("email",)) == ["email"]


def test_a_card_is_never_also_a_phone_number():
    """A 15-digit card number has a phone number's count of digits: looked for first, it is a card only."""
    assert pii.found("amex 3782 822463 10005", ALL) == ["card"]
    assert pii.redact("amex 3782 822463 10005", ALL) == "amex [card]"
