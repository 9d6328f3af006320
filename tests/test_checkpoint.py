"""Checkpoints: round trip, the tied head, atomic swap, and every refusal (corrupt, planted, future)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import octlm.checkpoint as checkpoint
from octlm.checkpoint import (
    Checkpoint,
    load_checkpoint,
    load_model,
    save_checkpoint,
    sha256_file,
)
from octlm.config import Config, config_from_dict
from octlm.corpus import Document
from octlm.errors import UserError
from octlm.model import Decoder
from octlm.run import Run
from octlm.tokenizer import Tokenizer, train_tokenizer


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
        "rng": {"torch": torch.get_rng_state()},
        "note": [1, "a"],
    }
    save_checkpoint(run_dir, model, optimizer, config, step, state)
    tokenizer.save(run_dir / "tokenizer.json")
    return run_dir, model, optimizer


def edit_meta(run_dir: Path, change: Any) -> None:
    path = run_dir / "checkpoint" / "config.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


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


def test_crash_while_saving_keeps_the_last_checkpoint(
    tmp_path: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, model, optimizer = make_run(tmp_path, tokenizer)

    def dies(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dies)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(run_dir, model, optimizer, tiny(), 9, {})
    assert load_checkpoint(run_dir).step == 3
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".checkpoint")]


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


def test_future_schema_and_bad_meta_are_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    run_dir, *_ = make_run(tmp_path, tokenizer)
    edit_meta(run_dir, lambda m: m.update(schema_version=2))
    with pytest.raises(UserError, match="schema_version 2, newer than this octlm reads"):
        load_checkpoint(run_dir)
    edit_meta(run_dir, lambda m: m.update(schema_version=1))
    edit_meta(run_dir, lambda m: m["config"]["model"].update(position="rope"))
    with pytest.raises(UserError, match="does not match its recorded config hash"):
        load_checkpoint(run_dir)
    (run_dir / "checkpoint" / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_checkpoint(run_dir)


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
