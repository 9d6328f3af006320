"""`octlm data`: prepare (or reuse) the cached token files and print their figures."""

from __future__ import annotations

import argparse
import time

from octlm.commands import options
from octlm.commands.options import add_config_arguments, config_from_args
from octlm.config import config_fields
from octlm.data.cache import prepare_data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, config_fields("data", "model.vocab_size"))
    options.add_threads(parser, what="threads that train the tokenizer and encode the corpus")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    start = time.perf_counter()
    with options.threads(args.threads, tokenizers=True):
        data = prepare_data(cfg.data, cfg.model.vocab_size)
    seconds = time.perf_counter() - start
    documents, corpus_mb = data.manifest["documents"], data.manifest["bytes"] / 1e6
    print(f"corpus           {documents:,} documents, {corpus_mb:.2f} MB")
    print(f"tokenizer        {data.tokenizer.vocab_size:,} entries, sha256 {data.tokenizer_sha256[:12]}")
    print(
        f"train tokens     {len(data.train):,} ({data.train_documents:,} documents, "
        f"{data.train_bytes_per_token:.3f} bytes/token)"
    )
    print(
        f"val tokens       {len(data.val):,} ({data.val_documents:,} documents, "
        f"{data.val_bytes_per_token:.3f} bytes/token)"
    )
    if data.encode_mb_per_s is not None:
        print(f"encode           {data.encode_mb_per_s:.2f} MB/s")
    else:
        speed = data.meta["tokens"]["encode_mb_per_s"]
        print(f"encode           reused cached files (encoded at {speed:.2f} MB/s)")
    print(f"files            {data.folder} ({data.train.dtype.name})")
    print(f"seconds          {seconds:.2f}")
    return 0
