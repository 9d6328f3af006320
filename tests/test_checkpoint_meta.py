"""A checkpoint's config.json: a future schema version, a config that no longer matches its hash, every value
validated and named by its key and range, hand edits named by key (meta_sha256), and checkpoints written before
meta_sha256 still loading. The run folders and the edit helper are tests/test_checkpoint.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import test_checkpoint
import torch
from test_checkpoint import edit_meta, make_run

from octlm.data.tokenizer import Tokenizer
from octlm.errors import UserError
from octlm.storage.checkpoint import load_checkpoint, load_model, read_meta
from octlm.storage.jsonable import encode_tensors
from octlm.storage.run import Run

tokenizer = test_checkpoint.tokenizer  # its module-scoped fixture, which pytest finds here by this name


def test_future_schema_and_bad_meta_are_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    edit_meta(run_dir, lambda m: m.update(schema_version=2))
    with pytest.raises(UserError, match="schema_version 2, newer than this octlm reads"):
        load_checkpoint(run_dir)
    edit_meta(run_dir, lambda m: m.update(schema_version=1))
    edit_meta(run_dir, lambda m: m["config"]["model"].update(position="rope"), reseal=False)
    with pytest.raises(
        UserError, match=r"does not match its recorded config hash \(config.model.position was"
    ):
        load_checkpoint(run_dir)
    (run_dir / "checkpoint" / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_checkpoint(run_dir)


def _set(path: str, value: Any) -> Any:
    """An edit of config.json: set the entry at a dotted path (`state.rng.torch.shape`)."""

    def change(meta: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = meta
        for key in parents:
            target = target[key]
        target[last] = value

    return change


# (edit, the message's end after "has an invalid "): a value that fails validation names key and range.
INVALID = {
    "step negative": (_set("step", -3), "step: expected an integer >= 0, found -3"),
    "step a string": (_set("step", "3"), 'step: expected an integer >= 0, found "3"'),
    "step a boolean": (_set("step", True), "step: expected an integer >= 0, found true"),
    "step past steps": (
        _set("step", 7000),
        "step: expected an integer <= config.train.steps (6000), found 7000",
    ),
    "state not an object": (_set("state", "x"), 'state: expected a JSON object, found "x"'),
    "losses not numbers": (
        _set("state.losses_since_eval", ["a"]),
        'state.losses_since_eval: expected a list of at most 3 finite numbers, found ["a"]',
    ),
    "losses NaN": (
        _set("state.losses_since_eval", [float("nan")]),
        "state.losses_since_eval: expected a list of at most 3 finite numbers, found [NaN]",
    ),
    "more losses than steps": (
        _set("state.losses_since_eval", [1.0] * 4),
        "state.losses_since_eval: expected a list of at most 3 finite numbers, found [1.0, 1.0, 1.0, 1.0]",
    ),
    "rng shape": (
        _set("state.rng.torch.shape", [2528, 2]),
        'state.rng.torch: expected a uint8 tensor of shape [5056], found {"__tensor__": "uint8", "shape": [2528, 2]',
    ),
    "tensor length": (
        _set("state.rng.torch.shape", [5000]),
        "state.rng.torch: tensor data is 5056 bytes, but uint8 of shape [5000] needs 5000",
    ),
    "rng wrong size": (
        _set("state.rng.batches", {"__tensor__": "uint8", "shape": [3], "base64": "AAAA"}),
        'state.rng.batches: expected a uint8 tensor of shape [5056], found {"__tensor__": "uint8", ',
    ),
    "rng missing": (
        lambda m: m["state"]["rng"].pop("batches"),
        "state.rng: expected an object with torch, batches (and on CUDA, cuda) states",
    ),
    "tensor dtype": (
        _set("state.rng.torch.__tensor__", "nn"),
        "state.rng.torch: tensor type 'nn' is not one",
    ),
    "tensor base64": (
        _set("state.rng.torch.base64", "!!"),
        "state.rng.torch: tensor data is not valid base64",
    ),
    "world size": (_set("state.world_size", 0), "state.world_size: expected an integer >= 1, found 0"),
    "sha256 entry": (
        _set("sha256.tokenizer", "abc"),
        'sha256.tokenizer: expected a SHA-256 (64 lower-case hex digits), found "abc"',
    ),
    "sha256 not a table": (_set("sha256", []), "sha256: expected a JSON object of SHA-256 digests, found []"),
    "config_name": (_set("config_name", 5), "config_name: expected a string, found 5"),
    "config": (_set("config", "x"), 'config: expected a JSON object, found "x"'),
    "meta_sha256": (
        _set("meta_sha256", 1),
        "meta_sha256: expected a JSON object of SHA-256 digests, found 1",
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_meta_names_the_key_and_the_range(tmp_path: Path, tokenizer: Tokenizer, case: str) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    change, message = INVALID[case]
    edit_meta(run_dir, change, reseal=False)  # validation comes first: the value is named, not the edit
    path = run_dir / "checkpoint" / "config.json"
    for load in (load_checkpoint, load_model, lambda r: read_meta(Run.of(r).find_checkpoint())):
        with pytest.raises(UserError) as info:
            load(run_dir)
        assert str(info.value).startswith(f"{str(path)!r} has an invalid {message}"), str(info.value)


def test_meta_validation_of_other_entries(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    edit_meta(run_dir, _set("extra", 1))
    with pytest.raises(UserError, match=r"config.json' has an entry 'extra' octlm never writes"):
        load_checkpoint(run_dir)
    edit_meta(run_dir, lambda m: m.pop("extra"))
    edit_meta(run_dir, _set("config.model.n_heads", "two"))
    with pytest.raises(
        UserError, match=r"config.json' holds an invalid config \(config 'tiny' has 1 problem"
    ):
        load_checkpoint(run_dir)
    edit_meta(run_dir, _set("config.model.n_heads", 2))
    edit_meta(run_dir, lambda m: m["sha256"].pop("config"))
    with pytest.raises(UserError, match=r"has an invalid sha256: expected an entry 'config'"):
        load_checkpoint(run_dir)


# Hand edits that still validate: the meta_sha256 table names the key.
EDITS = {
    "step": (_set("step", 2), "step"),
    "a state entry": (_set("state.note", [2, "a"]), "state.note"),
    "an rng state": (
        _set("state.rng.torch", encode_tensors(torch.Generator().manual_seed(5).get_state())),
        "state.rng.torch",
    ),
    "a bookkeeping config field": (_set("config.train.run_name", "other"), "config.train.run_name"),
    "an added state entry": (_set("state.world_size", 1), "state.world_size (added)"),
    "a removed state entry": (lambda m: m["state"].pop("note"), "state.note (removed)"),
    "the schema version": (_set("meta_sha256.schema_version", "0" * 64), "schema_version"),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_hand_edit_is_named_by_its_key(tmp_path: Path, tokenizer: Tokenizer, case: str) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    change, key = EDITS[case]
    edit_meta(run_dir, change, reseal=False)
    with pytest.raises(UserError) as info:
        load_checkpoint(run_dir)
    assert str(info.value) == (
        f"{str(run_dir / 'checkpoint' / 'config.json')!r} was edited by hand: {key} does not match the hash "
        "recorded when it was written (meta_sha256); restore the file or train again"
    )
    edit_meta(run_dir, lambda m: None)  # resealed: an edit made knowingly is accepted
    load_checkpoint(run_dir)


def test_checkpoint_without_meta_hash_still_loads(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """Checkpoints written before meta_sha256 existed (same schema 1; the entry is additive) load, validated."""
    run_dir, *_ = make_run(tmp_path, tokenizer)
    edit_meta(run_dir, lambda m: m.pop("meta_sha256"), reseal=False)
    assert load_checkpoint(run_dir).step == 3
    edit_meta(run_dir, _set("step", -1), reseal=False)
    with pytest.raises(UserError, match="has an invalid step: expected an integer >= 0, found -1"):
        load_checkpoint(run_dir)
