"""Serving devices: gevent connection sharing, the gunicorn workers, the GC tuning, the SQLite backend, the atomic
cache."""
