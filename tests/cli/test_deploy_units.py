"""The systemd units of docs/operations.md (deploy/systemd/) start what they say, as they say it: each is restarted
whenever it exits, runs a command that exists here with options it accepts, and reads its settings from a file, not
from the unit (no secret in the repository)."""

from __future__ import annotations

import configparser
import shlex
import subprocess

import pytest

from tests.cli.test_plain_shell import plain_shell
from tests.integration._support import ROOT

UNITS = ROOT / "deploy" / "systemd"
INSTALL = "/srv/reactsite"  # where the units expect the checkout; each command is run here from ROOT instead


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string((UNITS / name).read_text(encoding="utf-8"))
    return parser


ALL = ["reactsite-web.service", "reactsite-worker.service", "reactsite-celery-worker.service"]
ALL += ["reactsite-celery-beat.service"]


def test_every_unit_of_the_folder_is_checked_here():
    assert sorted(p.name for p in UNITS.glob("*.service")) == sorted(ALL)


@pytest.mark.parametrize("name", ALL)
def test_each_unit_is_restarted_and_reads_its_settings_from_a_file(name):
    service = unit(name)["Service"]
    assert service["Restart"] == "always"
    assert service["WorkingDirectory"] == INSTALL
    assert service["EnvironmentFile"].startswith("/etc/")
    assert "Environment" not in service, "settings (secrets among them) belong in the EnvironmentFile"
    assert service["ExecStart"].startswith(f"{INSTALL}/.venv/bin/")
    assert unit(name)["Install"]["WantedBy"] == "multi-user.target"


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> dict[str, str]:
    return plain_shell(DATABASE_URL=f"sqlite:///{tmp_path_factory.mktemp('units') / 'db.sqlite3'}")


def checked(argv: list[str], shell: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=shell, capture_output=True, text=True, timeout=120, check=False)


def test_the_worker_units_command_accepts_its_options(shell):
    argv = shlex.split(unit("reactsite-worker.service")["Service"]["ExecStart"].replace(f"{INSTALL}/", ""))
    assert argv[:3] == [".venv/bin/python", "manage.py", "run_worker"]
    # the command as written, with --help appended: argparse refuses an unknown option before it prints the help
    done = checked([*argv, "--help"], shell)
    assert done.returncode == 0, done.stderr
    assert "--drain" in done.stdout


def test_the_web_units_gunicorn_reads_the_projects_config_and_app(shell):
    argv = shlex.split(unit("reactsite-web.service")["Service"]["ExecStart"].replace(f"{INSTALL}/", ""))
    assert argv[0] == ".venv/bin/gunicorn"
    assert (ROOT / argv[argv.index("-c") + 1]).is_file()
    # gunicorn --check-config loads the config file and imports the app, then exits: both exist as written
    done = checked([*argv, "--check-config"], shell)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("name", "command", "option"),
    [
        ("reactsite-celery-worker.service", "worker", "--concurrency"),
        ("reactsite-celery-beat.service", "beat", "--schedule"),
    ],
)
def test_the_celery_units_commands_accept_their_options(shell, name, command, option):
    exec_start = unit(name)["Service"]["ExecStart"].replace(f"{INSTALL}/", "").replace("%H", "host")
    argv = shlex.split(exec_start)
    assert argv[:4] == [".venv/bin/celery", "-A", "reactsite", command]
    done = checked([*argv, "--help"], shell)  # click refuses an unknown option before it prints the help
    assert done.returncode == 0, done.stdout + done.stderr
    assert option in done.stdout
