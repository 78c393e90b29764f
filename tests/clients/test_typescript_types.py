"""openapi-typescript turns the served document into types that `tsc --noEmit` accepts for a small typed usage file
(tests/clients/ts/usage.ts; issue 34, item 1). The tools are pinned by tests/clients/ts/package-lock.json and
installed once by `make test` (`npm ci`), offline after that; without npm the check is skipped and says why."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests.integration._support import ROOT

TS = Path(__file__).resolve().parent / "ts"
STAMP = "tests/clients/ts/node_modules/.installed"  # the Makefile's target: installed and up to date

pytestmark = [
    pytest.mark.skipif(
        shutil.which("npm") is None,
        reason="npm is not installed: the TypeScript client check needs Node.js and npm (tests/clients/ts)",
    ),
    pytest.mark.django_db,
]


@pytest.fixture(scope="module")
def node_bin() -> Path:
    """The pinned tools; `make test` installed them already, else this installs them once (the same make target)."""
    done = subprocess.run(["make", "-s", STAMP], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return TS / "node_modules" / ".bin"


def run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    return printed


def test_the_generated_types_check_against_a_typed_usage_file(node_bin, tmp_path):
    response = APIClient().get("/api/v1/schema.json")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    (tmp_path / "schema.json").write_bytes(response.content)
    printed = run([str(node_bin / "openapi-typescript"), "schema.json", "--output", "api.ts"], tmp_path)
    assert "warn" not in printed.lower() and "error" not in printed.lower(), printed
    for name in ("usage.ts", "tsconfig.json"):
        shutil.copy(TS / name, tmp_path / name)
    run([str(node_bin / "tsc"), "--project", "tsconfig.json"], tmp_path)  # strict; its @ts-expect-error lines too
