"""The tokenizer section: training seconds and encoding MB/s on the stdlib corpus."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from measure import summary, time_once


def encode_each(tok: Any, texts: list[str]) -> list[Any]:
    """One `encode` call per document."""
    return [tok.encode(t) for t in texts]


def first_bytes(docs: list[Any], max_bytes: int) -> list[Any]:
    """The leading documents, until at least `max_bytes` of UTF-8 text (all of them if fewer)."""
    kept, size = [], 0
    for d in docs:
        if size >= max_bytes:
            break
        kept.append(d)
        size += len(d.text.encode("utf-8"))
    return kept


def bench_tokenizer(max_bytes: int | None, vocab_sizes: list[int], reps: int, log) -> dict[str, Any]:
    from octlm.data.corpus import total_bytes
    from octlm.data.sources import stdlib_documents
    from octlm.data.tokenizer import train_tokenizer

    docs = stdlib_documents()
    if max_bytes is not None:
        docs = first_bytes(docs, max_bytes)
    mb = total_bytes(docs) / 1e6
    texts = [d.text for d in docs]
    log(f"tokenizer: {len(docs)} stdlib documents, {mb:.1f} MB")
    out: dict[str, Any] = {
        "implementation": "octlm.data.tokenizer",
        "documents": len(docs),
        "megabytes": mb,
        "rows": {},
    }
    for vocab in vocab_sizes:
        train_s, tok = [], None
        for _ in range(reps):
            start = time.perf_counter()
            tok = train_tokenizer(docs, vocab)
            train_s.append(time.perf_counter() - start)
        assert tok is not None
        tok.encode_batch(texts[:10])  # warm-up
        serial = [mb / time_once(partial(encode_each, tok, texts)) for _ in range(reps)]
        batch = [mb / time_once(partial(tok.encode_batch, texts)) for _ in range(reps)]
        out["rows"][str(vocab)] = {
            "train_s": summary(train_s),
            "encode_mb_s": summary(serial),
            "encode_batch_mb_s": summary(batch),
        }
    return out
