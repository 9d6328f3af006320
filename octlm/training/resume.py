"""What a run starts from: nothing (a new run), another run's weights (`train.init_from`: fine-tuning), or a
checkpoint and the data it was trained on, each checked.

A resume may change only bookkeeping (`RESUMABLE_FIELDS`); the corpus, the tokenizer and the token files must
hash the same as when the run started. A run started from another's weights may change the context and how
RoPE scales it (`EXTENSION_FIELDS`), not the model, and must read tokens with the same tokenizer. Everything
is checked before anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from octlm.config import Config, config_from_dict, load_config
from octlm.data.cache import PreparedData, prepare_data
from octlm.data.corpus import load_corpus
from octlm.errors import UserError
from octlm.runtime import Dist
from octlm.storage.checkpoint import Checkpoint, load_checkpoint, read_meta
from octlm.storage.run import Run

# Fields a resume may change: they do not change what the next step computes (steps only reshapes the tail
# of the cosine). Everything else must equal the checkpoint's config.
RESUMABLE_FIELDS = frozenset(
    {
        "train.steps",
        "train.eval_interval",
        "train.eval_batches",
        "train.checkpoint_interval",
        "train.out_dir",
        "train.run_name",
        "train.device",
        "train.compile",
        "train.report",
        "train.sample_tokens",
        "train.log",
        "data.data_dir",  # where the cache lives; the token files themselves are checked by hash
    }
)


# Model fields a run started from another run's weights may change: the context, and RoPE's rescaling for it.
EXTENSION_FIELDS = frozenset(
    {"model.context_length", "model.rope_scaling", "model.rope_factor", "model.rope_original_length"}
)


def config_differences(old: Config, new: Config) -> list[str]:
    """`section.field new != old` for every field outside RESUMABLE_FIELDS that differs."""
    a, b = old.flat(), new.flat()
    return [
        f"{k} {b.get(k)} != {a.get(k)}"
        for k in sorted(set(a) | set(b))
        if k not in RESUMABLE_FIELDS and a.get(k) != b.get(k)
    ]


def checkpoint_to_resume(config: Config, run: Run, resume: bool, overwrite: bool) -> Checkpoint | None:
    """The checkpoint a resume continues (checked against `config`), or None for a new run.

    A new run refuses a folder that already holds one unless `overwrite` is set.
    """
    if not resume:
        if not overwrite and run.has_checkpoint():
            raise UserError(
                f"{str(run.path)!r} already holds a run; resume it with `octlm train --resume {run.path}`, "
                "choose another --name, or pass --overwrite to start it again"
            )
        return None
    ckpt = load_checkpoint(run.path, map_location="cpu")
    diffs = config_differences(ckpt.config, config)
    if diffs:
        raise UserError(
            f"config differs from the checkpoint's: {'; '.join(diffs)}; a resume keeps the run's settings "
            f"(only {', '.join(sorted(RESUMABLE_FIELDS))} may change)"
        )
    if ckpt.optimizer_state is None:
        raise UserError(f"{str(run.path)!r} has no optimizer state, so it cannot be resumed exactly")
    if ckpt.step >= config.train.steps:
        raise UserError(
            f"run {str(run.path)!r} already finished its {ckpt.step} steps; to train further, resume with "
            f"a larger --steps (e.g. octlm train --resume {run.path} --steps {2 * ckpt.step})"
        )
    return ckpt


def data_for_run(
    config: Config, ckpt: Checkpoint | None, dist: Dist, show: bool
) -> tuple[PreparedData, dict[str, str]]:
    """The token files and their SHA-256 table; on resume they must be the ones the checkpoint recorded."""
    recorded = ckpt.meta["sha256"] if ckpt else {}
    corpus = load_corpus(config.data)  # loaded and hashed once, here
    if ckpt and recorded.get("corpus") and corpus.sha256 != recorded["corpus"]:
        # Refused before prepare_data writes a cache for the edited text.
        raise UserError(
            f"corpus differs from the checkpoint's: SHA-256 {corpus.sha256[:12]} != "
            f"{str(recorded['corpus'])[:12]}; the text changed since the run started, so it cannot be resumed"
        )
    vocab = config.model.vocab_size
    # Rank 0 builds the cache first, so that ranks never write the same files at once.
    if dist.main:
        data = prepare_data(
            config.data, vocab, progress=show, corpus=corpus, block=config.model.context_length
        )
    dist.barrier()
    if not dist.main:
        data = prepare_data(
            config.data, vocab, progress=False, corpus=corpus, block=config.model.context_length
        )
    if data.tokenizer.vocab_size > vocab:
        raise UserError(
            f"the tokenizer has {data.tokenizer.vocab_size} entries but model.vocab_size is {vocab}"
        )
    hashes = data.hashes
    for key, value in hashes.items():
        if ckpt and recorded.get(key) != value:
            raise UserError(
                f"{key} differs from the checkpoint's: "
                f"SHA-256 {value[:12]} != {str(recorded.get(key))[:12]}; "
                "the corpus or tokenizer changed since the run started, so it cannot be resumed"
            )
    return data, hashes


def initial_weights(config: Config, data: PreparedData) -> dict[str, Tensor] | None:
    """The weights of the run `train.init_from` names, for a new run to start from (None: none named).

    Its model must be this one up to EXTENSION_FIELDS (a weight of the same shape in another scheme would load
    and mean something else), and its tokenizer the one the data is read with (ids would name other tokens).
    """
    source = config.train.init_from
    if not source:
        return None
    try:
        ckpt = load_checkpoint(Path(source), map_location="cpu", load_optimizer=False)
    except UserError as error:
        raise UserError(f"train.init_from: {error}") from None
    ours, theirs = config.flat(), ckpt.config.flat()
    diffs = [
        f"{k} {ours[k]} != {theirs.get(k)}"
        for k in sorted(ours)
        if k.startswith("model.") and k not in EXTENSION_FIELDS and ours[k] != theirs.get(k)
    ]
    if diffs:
        raise UserError(
            f"train.init_from = {source!r} holds another model: {'; '.join(diffs)}; a run may start from "
            f"another's weights changing only {', '.join(sorted(EXTENSION_FIELDS))}"
        )
    if ckpt.meta["sha256"].get("tokenizer") != data.tokenizer.sha256:
        raise UserError(
            f"train.init_from = {source!r} was trained with another tokenizer than this run's data "
            f"({str(ckpt.meta['sha256'].get('tokenizer'))[:12]} != {data.tokenizer.sha256[:12]}); use the "
            "same data section (source, text, vocab_size) as that run"
        )
    return ckpt.model_state


def config_for_resume(run: Run, overrides: dict[str, Any], config_path: str | None = None) -> Config:
    """The run's own config plus `overrides` (or, with `config_path`, that file plus overrides)."""
    if config_path is not None:
        return load_config(config_path, overrides)
    meta = read_meta(run.resume_source())
    return config_from_dict(meta["config"], name=str(meta.get("config_name", "custom")), overrides=overrides)
