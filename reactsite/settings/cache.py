"""The shared cache (Redis with REDIS_URL, else Django's database cache) and the rate limits' counters kept in it."""

from reactsite.settings.base import env

# Shared by every process: Redis when REDIS_URL is set, else a table of the database.
REDIS_URL = env("REDIS_URL", default="")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "reactsite.serving.cache.AtomicDatabaseCache", "LOCATION": "reactsite_cache"}}

# Rate limits: django-ratelimit's counters in the shared default cache (agents/usage/ratelimit.py). Its check E003
# refuses Django's DatabaseCache, whose incr is not atomic; the embedded default is
# reactsite.serving.cache.AtomicDatabaseCache, whose incr is (tests/integration/test_rate_counters.py), so E003 does
# not fire and stays live for a plain DatabaseCache. W001 ("not officially supported") fires for every backend but
# memcached and django-redis: Django's own RedisCache increments with Redis's atomic INCR and our database cache
# atomically too, so W001 alone is silenced. A per-process cache (locmem, dummy) is refused by E003 and by our own
# reactsite.E001 (agents/checks.py).
RATELIMIT_USE_CACHE = "default"
SILENCED_SYSTEM_CHECKS = ["django_ratelimit.W001"]
