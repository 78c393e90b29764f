#!/usr/bin/env python
"""Django's command-line utility."""

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["run_worker"]:
        # The concurrent background worker parks each waiting run as a greenlet: the standard library has to be
        # patched before Django, the SDKs or the database drivers are imported.
        from gevent import monkey

        monkey.patch_all()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
