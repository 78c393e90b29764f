"""The embedding model of memory recall: WordLlama's `l2_supercat` token embeddings (256 dimensions), whose weights
and tokenizer ship inside the `wordllama` wheel. Nothing is downloaded, ever: the files are opened from the installed
package (WordLlama.load() would look for the tokenizer in the wrong folder of its own wheel and then try the hub).

A text's vector is the average of its tokens' embeddings, L2-normalised: cosine similarity is a dot product. A short
text takes a fraction of a millisecond; loading happens once per process, on first use or at warm-up (gunicorn's
post_worker_init, the worker's start). docs/memory.md has the comparison that chose it.

One copy per machine: the token table (32,000 × 256 float16, 16 MB) is memory-mapped read-only from the wheel's
safetensors file, so every process on the machine reads the same pages of the page cache, and a process holds only
the rows its texts touched. Loading it with safetensors, as WordLlamaInference expects, gave each process a private
float32 copy (33 MB, 16 more while converting); so this module does WordLlamaInference.embed's few steps itself on the
mapped float16 table. float16 widens to float32 exactly, so the vectors are bit for bit what it computed
(tests/memory/test_embeddings.py). Only the tokenizer (~10 MB) is per process. Nor is the `wordllama` package
imported (pydantic, requests and its own extensions: ~7 MB a process): only its data files are read.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MODEL_ID = "wordllama/l2_supercat-256"  # what the vector index was built with (memory.VectorIndex, the checks)
DIM = 256
WEIGHTS = ("weights", "l2_supercat_256.safetensors")
TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
TENSOR = "embedding.weight"
BATCH = 64  # texts tokenised at once: WordLlamaInference.embed's default batch_size
_DTYPES = {"F16": "<f2", "F32": "<f4"}  # safetensors' names; float16 is what the wheel ships

_lock = threading.Lock()
_model: Model | None = None


class Model:
    """The token table (a read-only array, mapped) and the tokenizer; `embed` pools as WordLlamaInference.embed does
    (norm off, dense): the tokens' mean under the attention mask, in float32."""

    def __init__(self, table: np.ndarray, tokenizer: Tokenizer) -> None:
        self.table = table
        self.tokenizer = tokenizer
        tokenizer.enable_padding()  # WordLlamaInference's settings: a batch padded to its longest text, none cut
        tokenizer.no_truncation()

    def embed(self, texts: list[str]) -> np.ndarray:
        pooled = np.empty((len(texts), self.table.shape[1]), dtype=np.float32)
        for start in range(0, len(texts), BATCH):
            encoded = self.tokenizer.encode_batch(texts[start : start + BATCH], add_special_tokens=False)
            ids = np.array([e.ids for e in encoded], dtype=np.int32)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
            np.clip(ids, 0, self.table.shape[0] - 1, out=ids)
            tokens = self.table[ids]  # a private copy of these rows only; float16 × float32 below is float32, exact
            counts = np.maximum(mask.sum(axis=1, keepdims=True), 1.0).astype(np.float32)
            sums = np.sum(tokens * mask[..., np.newaxis], axis=1, dtype=np.float32)
            pooled[start : start + len(encoded)] = sums / counts
        return pooled


def package_dir() -> Path:
    """The installed `wordllama` package's folder, found without importing it (its imports cost memory we don't use)."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the wordllama package (memory recall's model files) is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def weights_path() -> Path:
    return package_dir().joinpath(*WEIGHTS)


def map_table(path: Path, name: str = TENSOR) -> np.ndarray:
    """The tensor `name` of a safetensors file as a read-only array over a shared mapping of the file: no copy.

    The format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
    data_offsets (from the end of the header), then the data."""
    with path.open("rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(size))
        entry = header[name]
        if entry["dtype"] not in _DTYPES:
            raise ValueError(f"{path.name}: {name} is {entry['dtype']}, not one of {sorted(_DTYPES)}")
        dtype, shape = np.dtype(_DTYPES[entry["dtype"]]), tuple(entry["shape"])
        begin, end = entry["data_offsets"]
        if end - begin != dtype.itemsize * int(np.prod(shape)):
            raise ValueError(f"{path.name}: {name}'s data_offsets do not fit its shape {shape}")
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)  # MAP_SHARED, read-only: the page cache's pages
    table = np.frombuffer(mapped, dtype=dtype, count=int(np.prod(shape)), offset=8 + size + begin).reshape(shape)
    return table  # read-only (a buffer of an ACCESS_READ mapping): a write would raise, never copy the page


def _load() -> Model:
    from tokenizers import Tokenizer  # noqa: PLC0415 - loaded once, lazily: most processes never embed anything

    table = map_table(weights_path())
    if table.ndim != 2 or table.shape[1] != DIM:
        raise ValueError(f"{WEIGHTS[1]}: expected a table of {DIM} columns, found the shape {table.shape}")
    return Model(table, Tokenizer.from_file(str(package_dir().joinpath(*TOKENIZER))))


def model() -> Model:
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
    vectors = np.asarray(model().embed(list(texts)), dtype=np.float32).reshape(len(texts), DIM)
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
