"""Every hash octlm computes: what each covers and where it is recorded. All are SHA-256, as hex digits.

- `sha256_bytes`: any bytes. A checkpoint's files (model.safetensors, optimizer.pt) by their bytes, recorded
  in its config.json's `sha256` table and checked on every load.
- `sha256_array`: a token stream `[N]` by its raw bytes: `train_tokens` and `val_tokens` in a checkpoint's
  `sha256` table (`PreparedData.hashes`), checked when a run resumes.
- `config_sha256`: what determines the trained weights: every config field except the bookkeeping ones
  (`CONFIG_BOOKKEEPING`) and the fields added later while at their defaults (`LATER_FIELDS`), so that older
  runs keep their hash. Recorded as the checkpoint's `sha256.config` and a cell's `config_sha256`.
- `tokenizer_sha256`: the tokenizer.json text: the data cache's meta.json and token files, a checkpoint's
  `sha256.tokenizer`; a run's tokenizer.json is checked against it when the model is loaded.
- `corpus_sha256`: every document's name and text, each prefixed by its UTF-8 length so no two corpora
  collide: the corpus manifest's `sha256`, the cache folder's name, a checkpoint's `sha256.corpus`.
- `name_fraction`: a number in [0, 1) fixed by a document's name, which puts it in the validation split.
- `meta_hashes` / `seal`: a checkpoint description's `meta_sha256` table, one hash per leaf of its entries,
  so a hand edit is named by its key.
- `eval_text_sha256`: the evaluation text an experiment scores (token ids and every token's byte count): a
  cell's and `octlm score`'s `eval_sha256`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

# Train fields that do not change the weights, left out of the config's hash.
CONFIG_BOOKKEEPING = ("out_dir", "run_name", "device", "compile", "report", "sample_tokens", "log")
# (section, field, default) of fields added after runs were first hashed: at their defaults they are left out.
LATER_FIELDS = (
    ("train", "dtype", "auto"),
    ("train", "init_from", ""),
    ("model", "rope_scaling", "none"),
    ("model", "rope_factor", 1.0),
    ("model", "rope_original_length", 0),
)
# The entries of a checkpoint description that `meta_sha256` covers; `sha256` is left out on purpose, each of
# its entries is checked against the thing it describes.
HASHED_KEYS = ("schema_version", "step", "config_name", "config", "state")


class Named(Protocol):
    """A document: `octlm.data.sources.Document`."""

    name: str
    text: str


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_array(array: Any) -> str:
    """SHA-256 of an array's raw bytes (a token stream `[N]`, memmapped or not)."""
    return sha256_bytes(memoryview(np.ascontiguousarray(array)).cast("B"))


def config_sha256(sections: dict[str, dict[str, Any]]) -> str:
    """SHA-256 of a config's sections (`Config.to_dict()`), bookkeeping and later fields at their defaults
    left out."""
    later = {(section, key): default for section, key, default in LATER_FIELDS}
    kept = {
        section: {
            key: value
            for key, value in table.items()
            if not (section == "train" and key in CONFIG_BOOKKEEPING)
            and not ((section, key) in later and value == later[section, key])
        }
        for section, table in sections.items()
    }
    return sha256_bytes(json.dumps(kept, sort_keys=True).encode())


def tokenizer_sha256(json_text: str) -> str:
    """SHA-256 of the tokenizer.json text that `Tokenizer.save` writes."""
    return sha256_bytes(json_text.encode("utf-8"))


def corpus_sha256(docs: Iterable[Named]) -> str:
    """SHA-256 over every name and text, each prefixed by its UTF-8 length, so no two corpora collide."""
    h = hashlib.sha256()
    for doc in docs:
        for part in (doc.name.encode("utf-8"), doc.text.encode("utf-8")):
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
    return h.hexdigest()


def name_fraction(name: str) -> float:
    """A number in [0, 1) fixed by the name alone."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2**64


def _leaves(value: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every leaf; an encoded tensor, a list or an empty dict is one leaf."""
    if isinstance(value, dict) and value and "__tensor__" not in value:
        for k, v in value.items():
            yield from _leaves(v, f"{key}.{k}")
    else:
        yield key, value


def meta_hashes(meta: dict[str, Any]) -> dict[str, str]:
    """{dotted key: SHA-256 of its canonical JSON} for the checkpoint description's entries `meta_sha256`
    covers (HASHED_KEYS)."""
    hashes = {}
    for top in HASHED_KEYS:
        if top in meta:
            for key, value in _leaves(meta[top], top):
                text = json.dumps(value, sort_keys=True, separators=(",", ":"))
                hashes[key] = sha256_bytes(text.encode("utf-8"))
    return hashes


def seal(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with its `meta_sha256` table (re)computed: what `save_checkpoint` writes."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return {**body, "meta_sha256": meta_hashes(body)}


def eval_text_sha256(tokens: np.ndarray, token_bytes: np.ndarray) -> str:
    """SHA-256 of the evaluation text: its token ids `[N]` then every token's byte count `[V]`, as stored."""
    return sha256_bytes(tokens.tobytes() + token_bytes.tobytes())
