"""A client that openapi-python-client generates from the served document drives the API end to end (issue 34,
item 1): generation prints no warning and makes every operation, and the client creates runs in each mode, decides
approvals, reads runs with their typed steps, lists with filters, cancels, deletes, and uses threads and facts
against a real server. Every answer parses into the generated models with no field left untyped."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests

from tests.conftest import make_user
from tests.integration._support import token_key

PACKAGE = "reactsite_client"
BIN = Path(sys.executable).parent  # the virtualenv's: the generator, and the ruff its hooks run
ARITHMETIC = "What is 12*7, plus 1?"


@pytest.fixture(scope="module")
def document(live_url) -> dict:
    response = requests.get(live_url + "/api/v1/schema.json", timeout=30)
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("application/")
    return response.json()


@pytest.fixture(scope="module")
def generation(document, tmp_path_factory) -> tuple[Path, str]:
    """The client generated from the served document, as a user runs the generator: its folder and what it printed."""
    folder = tmp_path_factory.mktemp("generated")
    (folder / "schema.json").write_text(json.dumps(document))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    args = [str(BIN / "openapi-python-client"), "generate", "--path", "schema.json", "--meta", "none"]
    args += ["--output-path", PACKAGE]
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    return folder, printed


@pytest.fixture(scope="module")
def client_package(generation) -> Iterator[ModuleType]:
    folder, _ = generation
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


class Api:
    """The generated package's operations and models, by name, and one authenticated client per user."""

    def __init__(self, package: ModuleType, url: str) -> None:
        self.package, self.url, self.clients = package, url, []

    def client(self, user) -> Any:
        client = self.package.AuthenticatedClient(
            base_url=self.url, token=token_key(user), raise_on_unexpected_status=True
        )
        self.clients.append(client)
        return client

    def close(self) -> None:
        """Kept-alive connections closed: gunicorn then stops at once instead of waiting for them."""
        for client in self.clients:
            client.get_httpx_client().close()

    def model(self, name: str) -> Any:
        return getattr(importlib.import_module(f"{PACKAGE}.models"), name)

    def call(self, client, operation: str, expected: int, **kwargs) -> Any:
        group = "v1" if operation.startswith("v1_") else "api"
        response = importlib.import_module(f"{PACKAGE}.api.{group}.{operation}").sync_detailed(client=client, **kwargs)
        assert response.status_code == expected, (operation, response.status_code, response.content[:500])
        return response.parsed


def untyped(value: Any) -> list[str]:
    """Keys that reached a parsed model as untyped extras, at any depth (free-form objects excepted)."""
    found = []
    if isinstance(value, list):
        for item in value:
            found += untyped(item)
    elif hasattr(value, "additional_properties") and hasattr(value, "__attrs_attrs__"):
        if not type(value).__name__.endswith(("Arguments", "ArgumentsType0", "OutputSchema")):
            found += [f"{type(value).__name__}.{key}" for key in value.additional_properties]
        for field in value.__attrs_attrs__:
            found += untyped(getattr(value, field.name))
    return found


def test_generation_prints_no_warning_and_makes_every_operation(generation, document):
    folder, printed = generation
    assert "warning" not in printed.lower() and "unable" not in printed.lower(), printed
    assert "could not" not in printed.lower(), printed
    made = {p.stem for p in (folder / PACKAGE / "api").rglob("*.py") if p.stem != "__init__"}
    operations = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    assert operations == made, (operations - made, made - operations)


@pytest.fixture
def api(client_package, live_url) -> Iterator[Api]:
    api = Api(client_package, live_url)
    yield api
    api.close()


@pytest.mark.django_db(transaction=True)
def test_a_generated_client_creates_approves_reads_lists_cancels_and_deletes(api):
    alice, rita = make_user("alice"), make_user("rita", staff=True, reviewer=True)
    owner, reviewer = api.client(alice), api.client(rita)
    paused = _create(api, owner, 201, mode="sync", sensitive_tools=["calculator"])
    assert (paused.status.value, paused.pending_action.tool) == ("awaiting_approval", "calculator")
    done = _approve(api, reviewer, paused)
    assert (done.status.value, done.stop_reason.value, done.output) == ("done", "final_answer", "85")
    _read_typed_steps(api, owner, str(done.id))
    failed = _create(api, owner, 201, output_schema={"type": "integer", "maximum": 10}, max_turns=3)
    errors = [s for s in api.call(owner, "api_v1_runs_retrieve", 200, id=str(failed.id)).steps if s.kind == "error"]
    assert failed.stop_reason.value == "max_turns" and "output schema" in errors[0].message
    stepped = _step_until_done(api, owner, _create(api, owner, 201, mode="step", output_schema={"type": "integer"}))
    assert (stepped.output, stepped.output_json) == ("85", 85)
    queued = _create(api, owner, 202, mode="background")
    assert queued.status.value == "queued"
    cancelled = api.call(owner, "api_v1_runs_cancel_create", 200, id=str(queued.id))
    assert (cancelled.status.value, cancelled.stop_reason.value) == ("done", "cancelled")
    _list_with_filters(api, owner, finished={done.id, stepped.id}, cancelled=queued.id)  # `failed` hit max_turns
    api.call(owner, "api_v1_runs_destroy", 204, id=str(queued.id))
    api.call(owner, "api_v1_runs_retrieve", 404, id=str(queued.id))


def _create(api: Api, client, expected: int, **fields) -> Any:
    if "output_schema" in fields:
        fields["output_schema"] = api.model("RunCreateOutputSchema").from_dict(fields["output_schema"])
    if "mode" in fields:
        fields["mode"] = api.model("ModeEnum")(fields["mode"])
    run = api.call(client, "api_v1_runs_create", expected, body=api.model("RunCreate")(input_=ARITHMETIC, **fields))
    assert untyped(run) == []
    return run


def _approve(api: Api, reviewer, run) -> Any:
    """The first call approved in the single form with edited arguments, the next in a batch."""
    advance, arguments = api.model("Advance"), api.model("AdvanceArgumentsType0").from_dict({"expression": "12*7"})
    run = api.call(reviewer, "api_v1_runs_advance_create", 200, id=str(run.id), body=advance(True, arguments))
    assert run.status.value == "awaiting_approval"  # the second calculator call
    decision = api.model("Decision")(call_id=run.pending_action.call_id, approval=True, reason="fine")
    run = api.call(reviewer, "api_v1_runs_advance_create", 200, id=str(run.id), body=advance(decisions=[decision]))
    assert untyped(run) == []
    return run


def _read_typed_steps(api: Api, client, run_id: str) -> None:
    detail = api.call(client, "api_v1_runs_retrieve", 200, id=run_id)
    assert untyped(detail) == []
    kinds = [type(step).__name__ for step in detail.steps]
    assert kinds == ["ModelStep", "ApprovalStep", "ToolStep", "ModelStep", "ApprovalStep", "ToolStep", "ModelStep"]
    first, approval, tool, *_, last = detail.steps
    call = first.tool_calls[0]
    assert (call.name, call.arguments.to_dict()) == ("calculator", {"expression": "12*7"})
    assert isinstance(first.usage.total_tokens, int) and first.kind.value == "model"
    assert (approval.approved, approval.reviewer, approval.reason) == (True, "rita", None)
    assert approval.arguments.to_dict() == approval.original_arguments.to_dict() == {"expression": "12*7"}
    assert (tool.name, tool.output, tool.is_error) == ("calculator", "84", False)
    assert last.final_answer == "85" and [s.index for s in detail.steps] == list(range(7))


def _step_until_done(api: Api, client, run) -> Any:
    for _ in range(10):
        if run.status.value == "done":
            return run
        run = api.call(client, "api_v1_runs_advance_create", 200, id=str(run.id))
        assert untyped(run) == []
    raise AssertionError(f"a step run still {run.status} after 10 units")


def _list_with_filters(api: Api, client, finished: set, cancelled: str) -> None:
    status, stop = api.model("ApiV1RunsListStatus"), api.model("ApiV1RunsListStopReason")
    answered = api.call(client, "api_v1_runs_list", 200, status=status("done"), stop_reason=stop("final_answer"))
    assert {run.id for run in answered.results} == finished and answered.count == 2
    page = api.call(client, "api_v1_runs_list", 200, stop_reason=stop("cancelled"), limit=1)
    assert [run.id for run in page.results] == [cancelled] and page.next_ is None
    assert api.call(client, "api_v1_runs_list", 200, status=status("running")).count == 0
    assert untyped(answered) == []


@pytest.mark.django_db(transaction=True)
def test_a_generated_client_uses_threads_facts_and_tools(api):
    client = api.client(make_user("ann"))
    thread = api.call(client, "api_v1_threads_create", 201, body=api.model("ThreadCreate")(title="Sums"))
    run = _create(api, client, 201, thread_id=thread.id)
    detail = api.call(client, "api_v1_threads_retrieve", 200, id=str(thread.id))
    assert [r.id for r in detail.runs] == [run.id] and detail.runs[0].output == "85" and untyped(detail) == []
    assert api.call(client, "api_v1_threads_list", 200).count == 1
    api.call(client, "api_v1_threads_destroy", 204, id=str(thread.id))
    fact = api.call(client, "api_v1_memory_facts_create", 201, body=api.model("FactCreate")(text="I like teal"))
    found = api.call(client, "api_v1_memory_facts_list", 200, q="teal")
    assert [f.text for f in found.results] == ["I like teal"] and untyped(found) == []
    api.call(client, "api_v1_memory_facts_destroy", 204, id=fact.id)
    assert api.call(client, "api_v1_memory_facts_list", 200).count == 0
    _invoke_tools(api, client)


def _invoke_tools(api: Api, client) -> None:
    """A tool by its own path, and by name on the generic route (names are strings: any tool, however late)."""
    listed = api.call(client, "api_v1_tools_list", 200)
    assert "calculator" in {tool.name for tool in listed}
    body, arguments = (api.model(f"ApiV1ToolsCalculatorInvokeCreateBody{part}") for part in ("", "Arguments"))
    own = api.call(client, "api_v1_tools_calculator_invoke_create", 200, body=body(arguments(expression="2+3")))
    assert (own.output, own.is_error) == ("5", False)
    body = api.model("ToolInvoke")(arguments=api.model("ToolInvokeArguments").from_dict({"expression": "6*7"}))
    assert api.call(client, "api_v1_tools_invoke_create", 200, name="calculator", body=body).output == "42"
    api.call(client, "api_v1_tools_invoke_create", 404, name="no-such-tool", body=body)
