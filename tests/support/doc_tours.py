"""A docs page's tour as a test sends it: the `api …` lines of the page's first shell block (the page's `api` shell
function: `api <path> [-X METHOD] [-d '<json>'] [-w …]` under /api/v1/), each with what its comments say it answers
(the comment after it on its line, then the comment lines below it, one per line)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path


def tour(page: Path) -> list[tuple[str, str]]:
    """(the `api …` command, what its comments say), in the page's order."""
    text = page.read_text(encoding="utf-8")
    block = text[text.index("```bash") :].split("```")[1]
    found: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line.startswith("api "):
            command, _, said = line.partition("  #")
            found.append((command.strip(), said.strip()))
        elif line.strip().startswith("#") and found:  # a comment continued on the next line
            found[-1] = (found[-1][0], (found[-1][1] + "\n" + line.strip().lstrip("#").strip()).strip())
    return found


def send(client, command: str):
    """The request `command` makes, through a DRF test client."""
    words = shlex.split(command)[1:]
    path, method, body = words[0], "GET", None
    rest = iter(words[1:])
    for word in rest:
        if word == "-X":
            method = next(rest)
        elif word == "-d":
            body, method = json.loads(next(rest)), ("POST" if method == "GET" else method)
        elif word == "-w":
            next(rest)
    call = getattr(client, method.lower())
    return call(f"/api/v1/{path}", body, format="json") if body is not None else call(f"/api/v1/{path}")
