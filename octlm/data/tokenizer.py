"""Byte-level BPE with Hugging Face `tokenizers`, wrapped so that text round-trips byte for byte.

The base vocabulary is the 256 bytes (GPT-2's printable byte alphabet), so any Unicode string encodes with no
unknown token, and merges learned from the training documents are added on top up to `vocab_size` entries.
One special token, `EOT`, separates documents in the token stream; `octlm.data.cache` places it by id.

Round trip: there is no normalizer (NFC or lowercasing would change text), no prefix space, the ByteLevel
decoder maps bytes back exactly, and special tokens are kept when decoding. `encode` never emits EOT: a
document that happens to contain the literal text `<|endoftext|>` encodes it as ordinary bytes, so a
document can never fake a document boundary. (When the tokenizer is exported to `transformers`, set
`clean_up_tokenization_spaces=False`, or its decode removes spaces before punctuation.)

Training is deterministic: the same documents and vocabulary size give an identical tokenizer.json (a test
checks this).

This module knows only text and ids; the `octlm tokenizer` command that trains one from the configured corpus
and stores it is `octlm.commands.tokenizer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, cached_property
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from octlm.data.sources import Document
from octlm.errors import UserError
from octlm.files import write_atomic
from octlm.hashing import tokenizer_sha256

EOT = "<|endoftext|>"
# The version of the setup in `train_tokenizer`. Bump it whenever that setup changes, so that tokens made with
# the old setup are never taken for tokens of the new one.
TOKENIZER_VERSION = 1
MIN_VOCAB = 257  # the 256 bytes + EOT


@cache  # built once: token_bytes runs per streamed token
def byte_of_char() -> dict[str, int]:
    """ByteLevel's stand-in character -> the byte it stands for (GPT-2's bytes_to_unicode inverted)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class Tokenizer:
    """A trained byte-level BPE tokenizer: text <-> token ids, plus save/load and a content hash."""

    def __init__(self, hf: HFTokenizer) -> None:
        if hf.token_to_id(EOT) is None:
            raise UserError(f"tokenizer has no {EOT!r} token; retrain it with `octlm tokenizer`")
        hf.encode_special_tokens = True  # literal "<|endoftext|>" in text is plain text (see module doc)
        self._hf = hf

    @property
    def vocab_size(self) -> int:
        """Entries in the vocabulary, EOT included (may be below the requested size on a tiny corpus)."""
        return self._hf.get_vocab_size(with_added_tokens=True)

    @property
    def eot_id(self) -> int:
        return int(self._hf.token_to_id(EOT))

    def encode(self, text: str) -> list[int]:
        """Token ids for `text`; never includes EOT."""
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` for many texts at once; `tokenizers` spreads the work over all cores."""
        return [e.ids for e in self._hf.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        """The text for `ids`; EOT shows as `<|endoftext|>`. Bytes cut mid-character become U+FFFD."""
        return self._hf.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes one token stands for (EOT: its literal text)."""
        token = self._hf.id_to_token(int(token_id))
        if token is None:
            raise UserError(f"token id {token_id} is out of range; the vocabulary has {self.vocab_size} ids")
        if token == EOT:
            return EOT.encode("utf-8")
        byte_of = byte_of_char()
        return bytes(byte_of[c] for c in token)

    def token_str(self, token_id: int) -> str:
        """A readable form of one token for reports: its bytes as UTF-8, broken characters as U+FFFD."""
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    def to_json(self) -> str:
        return self._hf.to_str()

    @cached_property
    def sha256(self) -> str:
        """SHA-256 of the tokenizer.json text that `save` writes (`octlm.hashing.tokenizer_sha256`)."""
        return tokenizer_sha256(self.to_json())

    def save(self, path: str | Path) -> None:
        """Write tokenizer.json atomically (a crash leaves the old file or the new one)."""
        write_atomic(path, self.to_json().encode("utf-8"))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Read a tokenizer.json written by `save`. Raises UserError when missing or corrupt."""
        path = Path(path)
        if not path.is_file():
            what = "is not a file" if path.exists() else "does not exist"
            raise UserError(f"tokenizer file {str(path)!r} {what}; train one with `octlm tokenizer`")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:  # permissions, an I/O error
            raise UserError(
                f"could not read tokenizer file {str(path)!r}: {error.strerror or error}"
            ) from None
        except UnicodeDecodeError as error:
            raise UserError(
                f"tokenizer file {str(path)!r} is not UTF-8 ({error.reason}); delete it and run "
                "`octlm tokenizer`"
            ) from None
        try:
            hf = HFTokenizer.from_str(text)
        except Exception as error:  # tokenizers raises a bare Exception for bad JSON
            raise UserError(
                f"tokenizer file {str(path)!r} is corrupt ({error}); delete it and run `octlm tokenizer`"
            ) from None
        return cls(hf)


def check_vocab_size(vocab_size: int) -> None:
    """A tokenizer of `vocab_size` entries can be trained (refused before any work, not after)."""
    if vocab_size < MIN_VOCAB:
        raise UserError(
            f"vocab_size = {vocab_size} is too small; byte-level BPE needs 256 bytes + EOT = {MIN_VOCAB}"
        )


def train_tokenizer(docs: Sequence[Document], vocab_size: int) -> Tokenizer:
    """Learn BPE merges from `docs` (pass the training split only) up to `vocab_size` entries."""
    check_vocab_size(vocab_size)
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],  # id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen in training or not
        show_progress=False,
    )
    hf.train_from_iterator((d.text for d in docs), trainer, length=len(docs))
    return Tokenizer(hf)


def stream_tokens(tokenizer: Tokenizer, docs: Sequence[Document]) -> int:
    """Tokens in the stream `octlm.data.cache` builds from `docs`: each document's tokens plus one EOT."""
    return sum(len(ids) + 1 for ids in tokenizer.encode_batch([d.text for d in docs]))
