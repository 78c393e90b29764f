"""System checks of our own: the shared state must really be shared."""

from django.conf import settings
from django.core import checks

PER_PROCESS_CACHES = {
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
}


@checks.register(checks.Tags.caches)
def check_shared_cache(app_configs=None, **kwargs):
    """The default cache is shared state (the health check reads it back): a per-process one would not be."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend in PER_PROCESS_CACHES:
        return [
            checks.Error(
                f"The default cache ({backend}) is not shared between processes.",
                hint="Use the database cache (the default) or set REDIS_URL.",
                id="reactsite.E001",
            )
        ]
    return []
