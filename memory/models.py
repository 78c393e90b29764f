"""Long-term memory: facts that belong to one user. Full-text search and the vector index live beside the table (see
migrations and memory/vectors.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

MAX_FACT_CHARS = 1000


class Fact(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="facts")
    text = models.CharField(max_length=MAX_FACT_CHARS)
    # sha256 of the normalised text: one fact per (owner, normalised text)
    digest = models.CharField(max_length=64, editable=False)
    run = models.ForeignKey("agents.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="facts")
    # The remember call that stored it ("<run id>:<step>"): a resumed run repeating that call gets the same answer.
    # Nullable with no default, so SQLite adds the column in place (a table rebuild would drop the FTS5 triggers).
    call_key = models.CharField(max_length=100, null=True, blank=True)
    # The fact's vector (memory/embeddings.py: float32, little-endian), the record the vector index is built from
    # (memory/vectors.py). Null until embedded (MEMORY_VECTORS off, or no index yet: `manage.py embed_facts`).
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "digest"], name="fact_owner_digest_unique")]
        indexes = [models.Index(fields=["owner", "-created_at"], name="fact_owner_created")]

    def __str__(self) -> str:
        return self.text[:60]
