"""Vectors of the scale bench's corpus, computed once with the configured provider and cached on disk.

`.ekko/bench-cache/<stream>-v<corpus version>-s<seed>-n<count>-<model>.npy` holds float32 rows, one
per text index; a sidecar `.json` records how many rows are done, so an interrupted run resumes
where it stopped. Text `i` of a stream depends only on (seed, i) (bench.scale_corpus), so the cache
is valid for any run with the same seed, count, corpus version and embedding model.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench._common import ROOT
from bench.scale_corpus import CORPUS_VERSION

CACHE_DIR = Path(os.environ.get("EKKO_DATA_DIR", ROOT / ".ekko")) / "bench-cache"
CHUNK = 1024


def cached_vectors(stream: str, *, seed: int, count: int, text: Callable[[int], str]) -> np.ndarray:
    """Return `count` vectors (float32, read-only memmap) of `text(0..count-1)`, embedding what is missing."""
    from memory.search.embeddings import get_provider

    provider = get_provider()
    model = provider.model_id.replace("/", "_")
    prefix = f"{stream}-v{CORPUS_VERSION}-s{seed}-n"
    for longer in sorted(CACHE_DIR.glob(f"{prefix}*-{model}.json")):  # a longer cache covers a shorter one
        if json.loads(longer.read_text())["done"] >= count:
            return np.load(longer.with_suffix(".npy"), mmap_mode="r")[:count]
    path = CACHE_DIR / f"{prefix}{count}-{model}.npy"
    progress_path = path.with_suffix(".json")
    done = json.loads(progress_path.read_text())["done"] if progress_path.exists() and path.exists() else 0
    if done >= count:
        return np.load(path, mmap_mode="r")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    rows = (np.lib.format.open_memmap(path, mode="r+") if done else
            np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(count, provider.dimensions)))
    started, first = time.perf_counter(), done
    provider.warm()
    while done < count:
        end = min(count, done + CHUNK)
        rows[done:end] = np.asarray(provider.embed([text(i) for i in range(done, end)]), dtype=np.float32)
        done = end
        rows.flush()
        progress_path.write_text(json.dumps({"done": done, "count": count, "model": provider.model_id}))
        elapsed = time.perf_counter() - started
        if done == count or (done // CHUNK) % 20 == 0:
            print(f"  embedding {stream}: {done:,}/{count:,} ({(done - first) / elapsed:,.0f} texts/s, "
                  f"load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    del rows
    return np.load(path, mmap_mode="r")


def embedding_rate(texts: list[str]) -> float:
    """Return the provider's texts/s on `texts` in batches of CHUNK (after a warm-up)."""
    from memory.search.embeddings import get_provider

    provider = get_provider()
    provider.warm()
    provider.embed(texts[:8])
    started = time.perf_counter()
    for start in range(0, len(texts), CHUNK):
        provider.embed(texts[start:start + CHUNK])
    return len(texts) / (time.perf_counter() - started)
