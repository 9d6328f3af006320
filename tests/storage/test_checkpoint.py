"""Checkpoints (octlm/storage/checkpoint.py): round trip, the tied head, atomic swap, a reader racing the writer,
the refusals of corrupt, swapped or planted files, and the checkpoint's config.json (a future schema version, a
config that no longer matches its hash, every value range-checked, hand edits named by their key). Real disk
faults are in tests/storage/test_checkpoint_full_disk.py."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from tiny import sha256_file

import octlm.storage.checkpoint as checkpoint
from octlm.config import Config, config_from_dict
from octlm.data.sources import Document
from octlm.data.tokenizer import Tokenizer, train_tokenizer
from octlm.errors import UserError
from octlm.hashing import seal
from octlm.model.decoder import Decoder
from octlm.storage.checkpoint import Checkpoint, load_checkpoint, load_model, read_meta, save_checkpoint
from octlm.storage.jsonable import encode_tensors
from octlm.storage.run import Run


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    docs = [Document(f"d{i}", "def f(x):\n    return x * 2  # é€\n" * (i + 1)) for i in range(4)]
    return train_tokenizer(docs, 300)


def tiny(position: str = "learned", tie: bool = True) -> Config:
    model = {
        "vocab_size": 300,
        "d_model": 16,
        "n_layers": 1,
        "n_heads": 2,
        "d_ff": 32,
        "context_length": 8,
        "position": position,
        "tie_embeddings": tie,
    }
    return config_from_dict({"model": model}, name="tiny")


def make_run(
    tmp_path: Path, tokenizer: Tokenizer, config: Config | None = None, step: int = 3
) -> tuple[Path, Decoder, torch.optim.Optimizer]:
    """A run folder with one optimizer step taken, as `octlm train` leaves it."""
    config = config or tiny()
    torch.manual_seed(0)
    model = Decoder(config.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    ids = torch.randint(0, 300, (2, 8))
    model(ids, ids)[1].backward()
    optimizer.step()
    run_dir = tmp_path / "runs" / "tiny"
    state = {
        "sha256": {"tokenizer": tokenizer.sha256},
        "rng": {"torch": torch.get_rng_state(), "batches": torch.Generator().manual_seed(1).get_state()},
        "note": [1, "a"],
    }
    save_checkpoint(run_dir, model, optimizer, config, step, state)
    tokenizer.save(run_dir / "tokenizer.json")
    return run_dir, model, optimizer


def edit_meta(run_dir: Path, change: Any, reseal: bool = True) -> None:
    """Change config.json; `reseal` recomputes its meta_sha256 as someone who knows the format would."""
    path = run_dir / "checkpoint" / "config.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(seal(meta) if reseal else meta))


class Planted:
    """A pickle that would create a file if it were ever unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.write_text, (self.marker, "code ran"))


# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tie", [True, False])
def test_round_trip_and_tied_head(tmp_path: Path, tokenizer: Tokenizer, tie: bool) -> None:
    run_dir, model, optimizer = make_run(tmp_path, tokenizer, tiny(tie=tie))
    stored = load_file(str(run_dir / "checkpoint" / "model.safetensors"))
    assert ("head.weight" in stored) is not tie  # the tied table is stored once
    ckpt = load_checkpoint(run_dir)
    assert (
        isinstance(ckpt, Checkpoint) and ckpt.step == 3 and ckpt.config.to_dict() == tiny(tie=tie).to_dict()
    )
    assert ckpt.state["note"] == [1, "a"] and torch.equal(ckpt.state["rng"]["torch"], torch.get_rng_state())
    assert ckpt.optimizer_state is not None and ckpt.optimizer_state["state"]
    for key, value in model.state_dict().items():
        assert torch.equal(ckpt.model_state[key], value), key

    loaded, config, tok = load_model(run_dir)
    assert not loaded.training and config.model.tie_embeddings is tie and tok.sha256 == tokenizer.sha256
    assert (loaded.head.weight is loaded.token_embedding.weight) is tie
    ids = torch.randint(0, 300, (2, 8))
    with torch.no_grad():
        assert torch.equal(loaded(ids)[0], model.eval()(ids)[0])

    fresh = torch.optim.AdamW(Decoder(config.model).parameters(), lr=1e-3, foreach=True)
    fresh.load_state_dict(ckpt.optimizer_state)  # fits an optimizer of the same model


def test_save_replaces_atomically_and_old_is_a_fallback(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, model, optimizer = make_run(tmp_path, tokenizer)
    save_checkpoint(run_dir, model, optimizer, tiny(), 5, {})
    assert load_checkpoint(run_dir).step == 5
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint", "tokenizer.json"]
    # A crash between the two renames leaves only .checkpoint-old: it still loads, and the next save works.
    (run_dir / "checkpoint").rename(run_dir / ".checkpoint-old")
    assert Run.of(run_dir).find_checkpoint().name == ".checkpoint-old" and load_checkpoint(run_dir).step == 5
    save_checkpoint(run_dir, model, optimizer, tiny(), 6, {})
    assert load_checkpoint(run_dir).step == 6 and not (run_dir / ".checkpoint-old").exists()


def test_a_serialization_failure_is_a_bug_not_a_disk_fault(
    tmp_path: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file is serialized in memory before anything is written, so a library failing there is no disk
    fault: its own exception propagates (a bug keeps its traceback); the last checkpoint stays and no temporary
    folder is left. (A failed write is the OS's own OSError: tests/storage/test_checkpoint_full_disk.py.)"""
    run_dir, model, optimizer = make_run(tmp_path, tokenizer)

    def fails(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(torch, "save", fails)
    with pytest.raises(RuntimeError, match="unexpected pos 576"):
        save_checkpoint(run_dir, model, optimizer, tiny(), 9, {})
    monkeypatch.undo()
    assert load_checkpoint(run_dir).step == 3
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".checkpoint")]


def test_a_run_path_through_a_file_is_the_wrong_kind(tmp_path: Path) -> None:
    """A real ENOTDIR: the run folder's parent is a file."""
    (tmp_path / "file").write_text("x")
    model = Decoder(tiny().model)
    with pytest.raises(
        UserError, match=r"\(the run folder\): a part of the path is a file, not a folder \(ENOTDIR\)"
    ):
        save_checkpoint(tmp_path / "file" / "run", model, None, tiny(), 0, {})
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("name", ["checkpoint", ".checkpoint-old"])
def test_symlinked_checkpoint_folder_is_refused(tmp_path: Path, tokenizer: Tokenizer, name: str) -> None:
    """Nothing is renamed, deleted or written through a link out of the run, on the first save or any later."""
    run_dir, model, optimizer = make_run(tmp_path, tokenizer)
    elsewhere = tmp_path / "elsewhere"
    (run_dir / "checkpoint").rename(elsewhere)
    (run_dir / name).symlink_to(elsewhere)
    before = {p.name: sha256_file(p) for p in elsewhere.iterdir()}
    for step in (4, 5):
        with pytest.raises(UserError) as info:
            save_checkpoint(run_dir, model, optimizer, tiny(), step, {})
        assert str(info.value).startswith(
            f"{str(run_dir / name)!r} is a symbolic link (to {str(elsewhere)!r}); octlm writes checkpoints "
            "only inside the run folder, never through a link"
        )
    assert {p.name: sha256_file(p) for p in elsewhere.iterdir()} == before
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([name, "tokenizer.json"])


def test_checkpoint_that_is_a_file_is_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, model, optimizer = make_run(tmp_path, tokenizer)
    (run_dir / ".checkpoint-old").write_text("mine")
    with pytest.raises(UserError, match=r"checkpoint-old' is a file, not a checkpoint folder; move it out"):
        save_checkpoint(run_dir, model, optimizer, tiny(), 4, {})
    assert (run_dir / ".checkpoint-old").read_text() == "mine" and load_checkpoint(run_dir).step == 3


def test_stale_temporary_link_is_unlinked_not_followed(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, model, optimizer = make_run(tmp_path, tokenizer)
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (run_dir / ".checkpoint-tmp-1").symlink_to(target)
    save_checkpoint(run_dir, model, optimizer, tiny(), 4, {})
    assert (target / "keep.txt").read_text() == "keep" and not (run_dir / ".checkpoint-tmp-1").is_symlink()
    assert load_checkpoint(run_dir).step == 4


def test_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(UserError, match="not an octlm run folder"):
        load_checkpoint(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match="has no checkpoint yet"):
        load_model(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file, not a run folder"):
        load_checkpoint(tmp_path / "file")


def test_truncated_weights_are_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    path = run_dir / "checkpoint" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(UserError, match="not a valid safetensors file"):
        load_checkpoint(run_dir)


def test_modified_weights_are_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    path = run_dir / "checkpoint" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40  # still parses, different numbers
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"was modified or corrupted: SHA-256 .* does not match config.json"):
        load_model(run_dir)


def test_pickle_planted_as_weights_is_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    marker = tmp_path / "pwned"
    path = run_dir / "checkpoint" / "model.safetensors"
    path.write_bytes(pickle.dumps(Planted(marker)))
    edit_meta(run_dir, lambda m: m["sha256"].update({"model.safetensors": sha256_file(path)}))
    with pytest.raises(UserError, match="not a valid safetensors file"):
        load_checkpoint(run_dir)
    assert not marker.exists()


def test_pickle_planted_as_optimizer_is_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    marker = tmp_path / "pwned"
    path = run_dir / "checkpoint" / "optimizer.pt"
    torch.save({"state": Planted(marker)}, path)
    edit_meta(run_dir, lambda m: m["sha256"].update({"optimizer.pt": sha256_file(path)}))
    with pytest.raises(UserError, match="weights_only=True"):
        load_checkpoint(run_dir)
    assert not marker.exists()
    load_model(run_dir)  # the weights alone are fine: generation never reads the optimizer


def test_modified_optimizer_is_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    path = run_dir / "checkpoint" / "optimizer.pt"
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(UserError, match="optimizer.pt' was modified or corrupted"):
        load_checkpoint(run_dir)


def test_another_models_weights_name_the_first_tensor(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """Another model's weights, with their hash updated: one line naming the tensor and both shapes."""
    run_dir, *_ = make_run(tmp_path, tokenizer)
    other_dir, *_ = make_run(
        tmp_path / "other",
        tokenizer,
        config_from_dict({"model": {**tiny().model.__dict__, "d_model": 24, "d_ff": 48}}, name="tiny"),
    )
    path = run_dir / "checkpoint" / "model.safetensors"
    path.write_bytes((other_dir / "checkpoint" / "model.safetensors").read_bytes())
    edit_meta(run_dir, lambda m: m["sha256"].update({"model.safetensors": sha256_file(path)}))
    expected = (
        f"{str(path)!r} holds the weights of another model: tensor 'token_embedding.weight' has shape "
        "[300, 24], the config's model needs [300, 16]; restore the run's own weights and config.json, or "
        "train again"
    )
    for load in (load_checkpoint, load_model):
        with pytest.raises(UserError) as info:
            load(run_dir)
        assert str(info.value) == expected


def test_modified_tokenizer_is_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    other = train_tokenizer([Document("a", "completely different text " * 20), Document("b", "more")], 280)
    other.save(run_dir / "tokenizer.json")
    with pytest.raises(UserError, match="tokenizer.json' was modified"):
        load_model(run_dir)


def test_save_without_optimizer(tmp_path: Path) -> None:
    model = Decoder(tiny("rope").model)
    path = save_checkpoint(tmp_path / "run", model, None, tiny("rope"), 0, {})
    assert not (path / "optimizer.pt").exists()
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.optimizer_state is None and ckpt.config.model.position == "rope"
    assert checkpoint.SCHEMA_VERSION == ckpt.meta["schema_version"] == 1
    assert sorted(ckpt.meta) == sorted(checkpoint.TOP_KEYS)
    leaves = [f"config.{section}.{key}" for section, table in ckpt.meta["config"].items() for key in table]
    expected = ["config_name", "schema_version", "state", "step", *leaves]  # an empty state is one leaf
    assert sorted(ckpt.meta["meta_sha256"]) == sorted(expected)


def test_a_reader_racing_the_writers_swap_reads_a_whole_checkpoint(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """`octlm generate` while training saves: each load returns one complete checkpoint (the weights are the
    ones its step wrote), never a spurious "modified" or "missing" error from reading across a swap."""
    import threading

    run_dir, model, optimizer = make_run(tmp_path, tokenizer, step=1)
    config, done, errors = tiny(), threading.Event(), []

    def writer() -> None:
        try:
            for step in range(2, 42):
                with torch.no_grad():
                    model.token_embedding.weight.fill_(float(step))  # the step, readable from the weights
                save_checkpoint(
                    run_dir, model, optimizer, config, step, {"sha256": {"tokenizer": tokenizer.sha256}}
                )
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    loads = 0
    while not done.is_set():
        ckpt = load_checkpoint(run_dir, load_optimizer=False)
        table = ckpt.model_state["token_embedding.weight"]
        assert ckpt.step == 1 or bool((table == float(ckpt.step)).all()), ckpt.step
        loads += 1
    thread.join()
    assert not errors and loads > 5 and load_checkpoint(run_dir).step == 41


# ------------------------------------------------------------------------------------------------------------
# The checkpoint's config.json: a future schema, values out of range, hand edits named by their key


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
