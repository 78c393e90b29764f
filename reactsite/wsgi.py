"""WSGI entry point (gunicorn reactsite.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
application = get_wsgi_application()
