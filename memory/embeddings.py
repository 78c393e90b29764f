"""The embedding model of memory recall: WordLlama's `l2_supercat` token embeddings (256 dimensions), whose weights
and tokenizer ship inside the `wordllama` wheel. Nothing is downloaded, ever: the files are opened from the installed
package (WordLlama.load() would look for the tokenizer in the wrong folder of its own wheel and then try the hub).

A text's vector is the average of its tokens' embeddings, L2-normalised: cosine similarity is a dot product. A short
text takes a fraction of a millisecond; loading happens once per process, on first use or at warm-up (gunicorn's
post_worker_init, the worker's start). docs/memory.md has the comparison that chose it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

MODEL_ID = "wordllama/l2_supercat-256"  # what the vector index was built with (memory.VectorIndex, the checks)
DIM = 256

_lock = threading.Lock()
_model = None


def _load():
    import wordllama  # noqa: PLC0415 - loaded once, lazily: most processes never embed anything
    from safetensors import safe_open  # noqa: PLC0415
    from tokenizers import Tokenizer  # noqa: PLC0415
    from wordllama import WordLlamaInference  # noqa: PLC0415

    root = Path(wordllama.__file__).parent
    with safe_open(root / "weights" / "l2_supercat_256.safetensors", framework="np", device="cpu") as weights:
        table = weights.get_tensor("embedding.weight")
    tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
    return WordLlamaInference(table, tokenizer, binary=False)


def model():
    """The process's model, loaded on first use (thread-safe)."""
    global _model  # noqa: PLW0603 - one model per process
    if _model is None:
        with _lock:
            if _model is None:
                _model = _load()
    return _model


def loaded() -> bool:
    return _model is not None


def embed(texts: list[str]) -> np.ndarray:
    """One unit-length float32 row per text."""
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    vectors = np.asarray(model().embed(list(texts), norm=False), dtype=np.float32).reshape(len(texts), DIM)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)  # a text of no known token stays the zero vector
    return np.nan_to_num(vectors, copy=False)


def embed_one(text: str) -> np.ndarray:
    return embed([text])[0]


def to_bytes(vector: np.ndarray) -> bytes:
    """The stored form: little-endian float32 (what sqlite-vec reads as a float vector, too)."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(data: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype="<f4")


def warm_up(background: bool = True) -> None:
    """Load the model now (in a thread, by default), so the first remember or recall does not wait for it."""
    if _model is not None:
        return
    if background:
        threading.Thread(target=model, name="memory-warm-up", daemon=True).start()
    else:
        model()
