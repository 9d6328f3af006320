"""The data-preparation commands: `octlm tokenizer` and `octlm data`.

Both load the configured corpus once and hand it on. `octlm tokenizer` trains on the training split and stores
the tokenizer in the cache folder `octlm.data.cache` keeps (recording it there, so `octlm data` reuses it);
`octlm data` prepares or reuses the token files. They live here, not in `octlm.data.tokenizer` or `octlm.data.cache`,
so that the tokenizer knows nothing of caches and neither module has to import the other's command.
"""

from __future__ import annotations

import argparse
import time

from octlm.config.schema import add_config_arguments, config_from_args
from octlm.data.cache import TOKENIZER_FILE, cache_folder, prepare_data, write_tokenizer_meta
from octlm.data.corpus import load_corpus
from octlm.data.tokenizer import stream_tokens, train_tokenizer
from octlm.errors import check_output, writing


class _ConfigCommand:
    """A command whose flags are the config's (`--config`, one flag per field, `--set`)."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_config_arguments(parser)


class TokenizerCommand(_ConfigCommand):
    """`octlm tokenizer`: train on the training split, save it where `octlm data` looks, print figures."""

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        cfg = config_from_args(args)
        corpus = load_corpus(cfg.data)
        path = cache_folder(cfg.data, corpus, cfg.model.vocab_size) / TOKENIZER_FILE
        check_output(path, "the tokenizer file", folder=False)  # before the training, not after it
        start = time.perf_counter()
        tokenizer = train_tokenizer(corpus.train, cfg.model.vocab_size)
        seconds = time.perf_counter() - start
        with writing(path.parent):
            tokenizer.save(path)
            write_tokenizer_meta(cfg.data, corpus, tokenizer, cfg.model.vocab_size, seconds)
        print(f"vocabulary       {tokenizer.vocab_size:,} (requested {cfg.model.vocab_size:,})")
        train_mb = corpus.train_bytes / 1e6
        print(f"trained on       {len(corpus.train):,} documents, {train_mb:.2f} MB (not validation)")
        print(f"training         {seconds:.2f} s")
        print(f"bytes per token  {corpus.val_bytes / stream_tokens(tokenizer, corpus.val):.3f} on validation")
        print(f"saved            {path}")
        return 0


class DataCommand(_ConfigCommand):
    """`octlm data`: prepare (or reuse) the token files and print their figures."""

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        cfg = config_from_args(args)
        start = time.perf_counter()
        data = prepare_data(cfg.data, cfg.model.vocab_size)
        seconds = time.perf_counter() - start
        documents, corpus_mb = data.manifest["documents"], data.manifest["bytes"] / 1e6
        print(f"corpus           {documents:,} documents, {corpus_mb:.2f} MB")
        print(f"tokenizer        {data.tokenizer.vocab_size:,} entries, sha256 {data.tokenizer_sha256[:12]}")
        print(f"train tokens     {len(data.train):,} ({data.train_documents:,} documents, "
              f"{data.train_bytes_per_token:.3f} bytes/token)")  # fmt: skip
        print(f"val tokens       {len(data.val):,} ({data.val_documents:,} documents, "
              f"{data.val_bytes_per_token:.3f} bytes/token)")  # fmt: skip
        if data.encode_mb_per_s is not None:
            print(f"encode           {data.encode_mb_per_s:.2f} MB/s")
        else:
            speed = data.meta["tokens"]["encode_mb_per_s"]
            print(f"encode           reused cached files (encoded at {speed:.2f} MB/s)")
        print(f"files            {data.folder} ({data.train.dtype.name})")
        print(f"seconds          {seconds:.2f}")
        return 0
