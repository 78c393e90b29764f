"""Memory recall by meaning (memory/embeddings.py, memory/vectors.py, docs/memory.md)."""

from reactsite.settings.base import env

# MEMORY_VECTORS off: facts get no vectors and recall is full-text only.
MEMORY_VECTORS = env.bool("MEMORY_VECTORS", default=True)
# Semantic and hybrid recall leave out facts whose cosine similarity to the query is below it.
MEMORY_MIN_SIMILARITY = env.float("MEMORY_MIN_SIMILARITY", default=0.05)
# The full-text ranking's weight in hybrid recall's reciprocal rank fusion (the vector ranking's is 1).
MEMORY_TEXT_WEIGHT = env.float("MEMORY_TEXT_WEIGHT", default=0.1)
