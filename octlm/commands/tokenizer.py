"""`octlm tokenizer`: train the byte-level BPE tokenizer on the training split, store it where `octlm data`
looks (recorded in the cache folder, so `octlm data` reuses it), print its figures. A tokenizer already there
for the same inputs (corpus, split, vocabulary size, tokenizer version) is reused, and said so."""

from __future__ import annotations

import argparse
import time

from octlm.commands import options
from octlm.commands.options import add_config_arguments, config_from_args
from octlm.config import config_fields
from octlm.data.cache import TOKENIZER_FILE, cache_folder, cached_tokenizer, write_tokenizer_meta
from octlm.data.corpus import load_corpus
from octlm.data.tokenizer import stream_tokens, train_tokenizer
from octlm.errors import check_output, writing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, config_fields("data", "model.vocab_size"))
    options.add_threads(parser, what="threads of the tokenizer's training")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    corpus = load_corpus(cfg.data)
    path = cache_folder(cfg.data, corpus, cfg.model.vocab_size) / TOKENIZER_FILE
    # Training is deterministic: the same text, split and settings would give the same file again.
    tokenizer = cached_tokenizer(cfg.data, corpus, cfg.model.vocab_size)
    training = "none: reused the tokenizer trained before on this same text with these settings"
    if tokenizer is None:
        check_output(path, "the tokenizer file", folder=False)  # before the training, not after it
        start = time.perf_counter()
        with options.threads(args.threads, tokenizers=True):
            tokenizer = train_tokenizer(corpus.train, cfg.model.vocab_size)
        seconds = time.perf_counter() - start
        with writing(path.parent):
            tokenizer.save(path)
            write_tokenizer_meta(cfg.data, corpus, tokenizer, cfg.model.vocab_size, seconds)
        training = f"{seconds:.2f} s"
    print(f"vocabulary       {tokenizer.vocab_size:,} (requested {cfg.model.vocab_size:,})")
    train_mb = corpus.train_bytes / 1e6
    print(f"trained on       {len(corpus.train):,} documents, {train_mb:.2f} MB (not validation)")
    print(f"training         {training}")
    print(f"bytes per token  {corpus.val_bytes / stream_tokens(tokenizer, corpus.val):.3f} on validation")
    print(f"saved            {path}")
    return 0
