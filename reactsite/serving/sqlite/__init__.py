"""Django's SQLite backend, with a write lock that gevent can wait for (see base.py)."""
