"""The SQLite driver (reactsite/serving/sqlite/driver.py): Django's backend bound to sqlean.py, which can load
sqlite-vec; the limits its module cannot report (Django 6.1 asks for them) are SQLite's compiled ones; the rest of
the process keeps the standard library's sqlite3."""

from __future__ import annotations

import sqlite3
import sys

import pytest
from django.db import connection

from reactsite.serving.sqlite import driver

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's driver"),
]


def test_the_backend_uses_sqlean_and_loads_sqlite_vec():
    connection.ensure_connection()
    assert connection.Database.__name__ == "sqlite3"  # the compatibility module Django's backend bound
    assert type(connection.connection).__module__ == "reactsite.serving.sqlite.driver"
    assert connection.vec_version and connection.vec_version.startswith("v")
    with connection.cursor() as cursor:
        cursor.execute("SELECT sqlite_version(), vec_version()")
        version, vec = cursor.fetchone()
    assert tuple(int(x) for x in version.split(".")) >= (3, 50) and vec == connection.vec_version


def test_the_standard_library_module_is_left_alone():
    assert sys.modules["sqlite3"] is sqlite3 and sqlite3.__file__.startswith(sys.base_prefix)


def test_the_reported_variable_limit_holds():
    """32,766 (what Django batched by with the standard module); sqlean.py's SQLite takes up to 250,000."""
    limit = connection.features.max_query_params
    assert limit == driver.LIMITS[9] == 32766
    with connection.cursor() as cursor:  # an IN list: no expression depth to hit first
        cursor.execute("SELECT 1 IN (" + ", ".join(["%s"] * limit) + ")", [1] * limit)
        assert cursor.fetchone()[0] == 1
        over = 250_001
        with pytest.raises(Exception, match="too many SQL variables"):
            cursor.execute("SELECT 1 IN (" + ", ".join(["%s"] * over) + ")", [1] * over)


def test_the_reported_column_limit_is_the_real_one():
    limit = driver.LIMITS[2]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(["1"] * limit))
        assert len(cursor.fetchone()) == limit
    with pytest.raises(Exception, match="too many columns"), connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(["1"] * (limit + 1)))


def test_an_unknown_limit_is_an_error_not_a_guess():
    connection.ensure_connection()
    with pytest.raises(connection.Database.ProgrammingError):
        connection.connection.getlimit(0)
