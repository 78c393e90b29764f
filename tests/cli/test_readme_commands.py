"""Every `manage.py` command the README and the pages of `docs/` show is written so that it works as written from a
plain shell after `make run`: through the virtualenv's interpreter (`.venv/bin/python manage.py …`). A bare
`python manage.py …` fails there: pyenv's shim picks Python 3.12 through `.python-version`, which has no Django (the
virtualenv has it).

Each page is read as a newcomer reads it: its shell blocks and its inline code. Each subcommand it names is then run
as written (`--help`) in a shell that has nothing of ours exported, so a renamed or missing command fails here too.
The pages live in the repository and say so: no link leaves it for a file that is not there, and the HTTP reference
(docs/api.md) names every operation, field and status of the OpenAPI document the server serves, and nothing else.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_plain_shell import plain_shell
from tests.integration._support import ROOT

README = ROOT / "README.md"
API = ROOT / "docs" / "api.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
VENV_PYTHON = ".venv/bin/python"
# Linked before it exists: the layout change writes it (issue 31, item 1).
PENDING = {ROOT / "docs" / "architecture.md"}
OPERATION = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) +(/[A-Za-z0-9_./{}-]*)")
# Served, but left out of the OpenAPI document they serve.
UNLISTED = {("GET", "/api/v1/schema"), ("GET", "/api/v1/schema.json"), ("GET", "/api/v1/docs")}


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def shell_lines(text: str) -> list[str]:
    """The page's commands: the lines of its shell blocks (a `\\` continuation joined) and its inline code (a span
    may wrap onto the next line)."""
    lines: list[str] = []
    prose: list[str] = []
    block: list[str] | None = None
    shell = False
    for line in text.splitlines():
        if line.startswith("```"):
            if block is None:
                block, shell = [], line[3:].strip() in ("", "bash", "sh", "shell", "console")
            else:
                if shell:
                    lines += "\n".join(block).replace("\\\n", " ").splitlines()
                block = None
        elif block is not None:
            block.append(line)
        else:
            prose.append(line)
    lines += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
    return lines


def manage_calls(lines: list[str]) -> list[tuple[str, str]]:
    """(what runs manage.py, its subcommand) for each call in the lines; a span that *starts* with `manage.py` is the
    command's name in prose, not a command line, and is left out."""
    calls = []
    for line in lines:
        for match in re.finditer(r"([^\s(`]*)\s+manage\.py\s+([a-z_]+)", line):
            calls.append((match.group(1), match.group(2)))
    return calls


def operations(text: str) -> set[tuple[str, str]]:
    """(method, path) of every `METHOD /path` the text names, without a trailing slash or a query."""
    return {(method, path.rstrip("/.") or "/") for method, path in OPERATION.findall(text)}


def test_the_parser_finds_bare_and_venv_calls():
    text = (
        "Run it:\n\n```bash\n.venv/bin/python manage.py agent \\\n  'hi'\npython manage.py bench  # no\n```\n\n"
        "Prose with `python3 manage.py prune` and the name `manage.py check` and `.venv/bin/python manage.py check`.\n"
    )
    calls = manage_calls(shell_lines(text))
    assert calls == [(VENV_PYTHON, "agent"), ("python", "bench"), ("python3", "prune"), (VENV_PYTHON, "check")]


def test_the_operation_parser_reads_methods_and_paths():
    text = "`GET /api/v1/runs?status=` and `POST /api/v1/runs/{id}/advance/`, then DELETE /api/v1/runs/{id}."
    assert operations(text) == {
        ("GET", "/api/v1/runs"), ("POST", "/api/v1/runs/{id}/advance"), ("DELETE", "/api/v1/runs/{id}"),
    }  # fmt: skip


def test_the_docs_are_there():
    assert README in PAGES and API in PAGES and len(PAGES) >= 6, [page_id(p) for p in PAGES]


def test_the_pages_show_their_commands():
    calls = [call for page in PAGES for call in manage_calls(shell_lines(page.read_text(encoding="utf-8")))]
    assert len(calls) >= 10, "the README and docs/ show their commands: the parser found too few"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_manage_py_command_runs_through_the_virtualenv(page):
    calls = manage_calls(shell_lines(page.read_text(encoding="utf-8")))
    wrong = sorted({f"{runner} manage.py {sub}" for runner, sub in calls if runner != VENV_PYTHON})
    assert not wrong, f"these fail in a plain shell (no Django outside the virtualenv): {wrong}"


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> dict[str, str]:
    made = subprocess.run(["make", "-s", ".env"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    assert (ROOT / VENV_PYTHON).exists(), "run the suite through `make test`, which creates the virtualenv"
    return plain_shell(DATABASE_URL=f"sqlite:///{tmp_path_factory.mktemp('readme') / 'db.sqlite3'}")


@pytest.fixture(scope="module")
def help_of(shell):
    """`manage.py <sub> --help` from a plain shell, each subcommand run once for all the pages."""
    seen: dict[str, subprocess.CompletedProcess[str]] = {}

    def run(sub: str) -> subprocess.CompletedProcess[str]:
        if sub not in seen:
            seen[sub] = subprocess.run(
                ["bash", "-c", f"{VENV_PYTHON} manage.py {sub} --help"],
                cwd=ROOT, env=shell, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
        return seen[sub]

    return run


def test_the_pages_name_the_commands_a_user_needs():
    subcommands = {sub for page in PAGES for _, sub in manage_calls(shell_lines(page.read_text(encoding="utf-8")))}
    needed = {"agent", "bench", "run_worker", "run_evals", "export_cases", "ensure_admin", "prune", "check"}
    assert needed <= subcommands, needed - subcommands


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_subcommand_a_page_names_runs_as_written(page, help_of):
    subcommands = sorted({sub for _, sub in manage_calls(shell_lines(page.read_text(encoding="utf-8")))})
    failed = {}
    for sub in subcommands:
        proc = help_of(sub)
        if proc.returncode != 0 or "usage:" not in proc.stdout:
            failed[sub] = (proc.stdout + proc.stderr)[-500:]
    assert not failed, failed


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_page_points_outside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text, "a user of the repository has no ../shared: the reference lives in docs/"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_names_a_file_of_the_repository(page):
    text = page.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:|#", t)]
    missing = []
    for target in targets:
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() and path not in PENDING:
            missing.append(target)
    assert not missing, missing


@pytest.fixture(scope="module")
def served(django_db_setup, django_db_blocker) -> dict:
    """The OpenAPI document as the server serves it."""
    from rest_framework.test import APIClient

    with django_db_blocker.unblock():
        response = APIClient().get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def served_operations(document: dict) -> set[tuple[str, str]]:
    methods = {"get", "post", "put", "patch", "delete"}
    return {
        (method.upper(), path.rstrip("/"))
        for path, item in document["paths"].items()
        for method in item
        if method in methods
    }


def test_the_reference_names_every_operation_the_server_serves(served):
    missing = served_operations(served) - operations(API.read_text(encoding="utf-8"))
    assert len(served_operations(served)) >= 25
    assert not missing, f"docs/api.md does not document: {sorted(missing)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_operation_a_page_names_is_served(page, served):
    named = {op for op in operations(page.read_text(encoding="utf-8")) if op[1].startswith(("/api/", "/v1/"))}
    unknown = named - served_operations(served) - UNLISTED
    assert not unknown, f"{page_id(page)} names operations the server does not serve: {sorted(unknown)}"


def test_the_reference_names_every_status_the_server_answers(served):
    statuses = {code for item in served["paths"].values() for op in item.values() for code in op["responses"]}
    text = API.read_text(encoding="utf-8")
    missing = sorted(code for code in statuses if f"`{code}" not in text and f" {code} " not in text)
    assert not missing, f"docs/api.md never mentions the statuses {missing}"


def _properties(schema: dict, components: dict) -> set[str]:
    """Every property name of a schema, through $ref, allOf/oneOf, arrays and nested objects."""
    names: set[str] = set()
    todo, seen = [schema], set()
    while todo:
        node = todo.pop()
        if not isinstance(node, dict):
            continue
        if "$ref" in node:
            ref = node["$ref"].rsplit("/", 1)[1]
            if ref not in seen:
                seen.add(ref)
                todo.append(components[ref])
            continue
        names |= set(node.get("properties", {}))
        todo += list(node.get("properties", {}).values())
        todo += [node.get("items")] + node.get("allOf", []) + node.get("oneOf", []) + node.get("anyOf", [])
    return names


def test_the_reference_names_every_field_and_parameter(served):
    components = served["components"]["schemas"]
    names: set[str] = set()
    for item in served["paths"].values():
        for op in item.values():
            names |= {p["name"] for p in op.get("parameters", [])}
            for body in [op.get("requestBody", {})] + list(op["responses"].values()):
                for media in body.get("content", {}).values():
                    names |= _properties(media.get("schema", {}), components)
    text = API.read_text(encoding="utf-8")
    missing = sorted(n for n in names if not re.search(rf"[`\"]{re.escape(n)}[`\"?]", text))
    assert len(names) >= 60
    assert not missing, f"docs/api.md never names these fields or parameters: {missing}"


@pytest.mark.django_db
def test_every_agent_a_page_uses_is_one_make_run_creates():
    from django.core.management import call_command

    from agents.models import Agent

    used, made = set(), set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        used |= set(re.findall(r"--agent +([a-z][\w-]*)", text)) | set(re.findall(r'"agent": *"([a-z][\w-]*)"', text))
        made |= set(re.findall(r"^api agents -d '\{\"name\": *\"([a-z][\w-]*)\"", text, re.MULTILINE))  # its own
    call_command("ensure_admin", stdout=io.StringIO())  # make setup's last step
    assert "support" in used, "the README's tour uses the demo agent"
    assert "calc" in made, "docs/agents.md makes the agent its tour uses"
    assert used - made <= set(Agent.objects.values_list("name", flat=True)), used - made


def celery_calls(lines: list[str]) -> list[tuple[str, str]]:
    """(what runs celery, its subcommand) for each `… celery -A reactsite <sub>` in the lines."""
    return [(m.group(1), m.group(2)) for line in lines for m in re.finditer(r"(\S*)celery -A reactsite ([a-z]+)", line)]


def test_the_pages_show_celerys_commands():
    calls = {sub for page in PAGES for _, sub in celery_calls(shell_lines(page.read_text(encoding="utf-8")))}
    assert {"worker", "beat", "inspect"} <= calls, calls


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_celery_command_a_page_shows_runs_as_written(page, shell):
    """Through the virtualenv (`.venv/bin/celery`: a plain shell has no `celery`), and its subcommand exists."""
    calls = celery_calls(shell_lines(page.read_text(encoding="utf-8")))
    wrong = sorted({f"{runner}celery" for runner, _ in calls if runner != ".venv/bin/"})
    assert not wrong, f"these fail in a plain shell: {wrong}"
    for sub in sorted({sub for _, sub in calls}):
        done = subprocess.run(
            ["bash", "-c", f".venv/bin/celery -A reactsite {sub} --help"],
            cwd=ROOT, env=shell, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0 and "Usage:" in done.stdout, (sub, (done.stdout + done.stderr)[-500:])
