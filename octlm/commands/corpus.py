"""`octlm corpus`: build the configured corpus, write its manifest, print its figures."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from octlm.commands.options import add_config_arguments, config_from_args
from octlm.config import config_fields
from octlm.data.corpus import data_dir_error, load_corpus
from octlm.files import write_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, config_fields("data"))


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args).data
    start = time.perf_counter()
    corpus = load_corpus(cfg)
    info = corpus.manifest()
    seconds = time.perf_counter() - start
    info["split"] = split = corpus.split_figures()
    path = Path(cfg.data_dir) / f"corpus-{corpus.sha256[:12]}" / "manifest.json"
    try:
        write_atomic(path, (json.dumps(info, indent=2) + "\n").encode("utf-8"))
    except OSError as error:
        raise data_dir_error(error, path.parent) from None
    print(f"source      {info['source']}")
    print(f"documents   {info['documents']:,} ({info['bytes'] / 1e6:.2f} MB)")
    print(f"train       {split['train_documents']:,} documents, {split['train_bytes'] / 1e6:.2f} MB")
    print(f"validation  {split['val_documents']:,} documents, {split['val_bytes'] / 1e6:.2f} MB")
    print(f"sha256      {info['sha256']}")
    print(f"manifest    {path}")
    print(f"seconds     {seconds:.2f}")
    return 0
