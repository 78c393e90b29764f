"""The SQLite driver, and the sqlite-vec extension on every connection (memory recall by meaning: memory/vectors.py).

sqlite-vec is a loadable extension, and the `sqlite3` module of CPython as pyenv and several distributions build it
cannot load extensions (it has no `enable_load_extension`). sqlean.py is the same module built with a recent SQLite
that can: when it is installed (requirements.txt), Django's SQLite backend is imported with `sqlite3` naming it, for
as long as that import takes, so the backend binds it; the rest of the process keeps the standard library's module.
Without sqlean.py, or if Django's backend was imported before this module could bind it, the standard module serves
and recall falls back to full-text search (the `memory.W001` system check says so).

Two copies of SQLite in one process (the standard module's and sqlean.py's) do not see each other's locks on a
file: nothing of ours opens the database with the standard module, and neither may a test that stands in for
another writer (tests/integration/test_green.py uses `connection.Database`).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

_BACKEND = "django.db.backends.sqlite3.base"
# Why the last connection could not load sqlite-vec (None: it could): for the system check.
vec_problem: str | None = None


# The limits Django 6.1 asks the connection for (Connection.getlimit, which sqlean.py's module, CPython 3.9's API,
# lacks): the column limit is SQLite's compiled one; for variables, sqlean.py builds SQLite with 250,000 and we
# report SQLite's default of 32,766, what the standard module reported here, so Django batches as it did
# (tests/integration/test_sqlite_driver.py checks both).
LIMITS = {2: 2000, 9: 32766}  # SQLITE_LIMIT_COLUMN, SQLITE_LIMIT_VARIABLE_NUMBER


def _compat(dbapi2: Any) -> ModuleType:
    """sqlean.py's dbapi2 with what Django 6.1 uses of Python 3.11's: Connection.getlimit and its constants."""

    class Connection(dbapi2.Connection):
        def getlimit(self, category: int) -> int:
            if category not in LIMITS:
                raise dbapi2.ProgrammingError(f"limit {category} is not known for this driver")
            return LIMITS[category]

    module: Any = ModuleType("sqlite3", dbapi2.__doc__)
    module.__dict__.update({k: v for k, v in vars(dbapi2).items() if not k.startswith("__")})
    module.SQLITE_LIMIT_COLUMN, module.SQLITE_LIMIT_VARIABLE_NUMBER = 2, 9
    module.dbapi2 = module
    module.connect = lambda *args, **kwargs: dbapi2.connect(*args, factory=Connection, **kwargs)
    return module


def django_backend() -> ModuleType:
    """Django's SQLite backend module, bound to sqlean.py's driver when possible."""
    if _BACKEND in sys.modules:
        return sys.modules[_BACKEND]
    try:
        import sqlean.dbapi2  # noqa: PLC0415 - optional: the standard module serves without it
    except ImportError:
        return importlib.import_module(_BACKEND)
    module = _compat(sqlean.dbapi2)
    saved = {name: sys.modules.get(name) for name in ("sqlite3", "sqlite3.dbapi2")}
    sys.modules["sqlite3"] = sys.modules["sqlite3.dbapi2"] = module
    try:
        return importlib.import_module(_BACKEND)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous


def load_vec(connection) -> str | None:
    """Load sqlite-vec into a new connection; its version, or None (and `vec_problem` says why)."""
    global vec_problem  # noqa: PLW0603 - one fact per process, read by the system check
    if not hasattr(connection, "enable_load_extension"):
        vec_problem = "this Python's sqlite3 module cannot load extensions (install sqlean.py: requirements.txt)"
        return None
    try:
        import sqlite_vec  # noqa: PLC0415 - optional

        connection.enable_load_extension(True)
        try:
            sqlite_vec.load(connection)
        finally:
            connection.enable_load_extension(False)
        version = connection.execute("SELECT vec_version()").fetchone()[0]
    except ImportError:
        vec_problem = "the sqlite-vec package is not installed (requirements.txt)"
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to load leaves full-text recall, and the check says why
        vec_problem = f"sqlite-vec did not load: {exc}"
        return None
    vec_problem = None
    return version
