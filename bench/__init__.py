"""The benchmark harness behind `manage.py bench` (docs/performance.md): servers, loads and the figures they give."""
