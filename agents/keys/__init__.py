"""API keys: made, revoked, checked on each request (docs/api-keys.md)."""
