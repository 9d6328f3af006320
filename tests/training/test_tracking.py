"""`--log tensorboard`: event files beside metrics.jsonl, read back with TensorBoard's own reader."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tiny
import torch
from PIL import Image
from safetensors.torch import load_file

import octlm.training.loop
from octlm.config import Config, config_from_dict
from octlm.errors import UserError
from octlm.positions.formulas import cosine_similarity_matrix
from octlm.storage.run import Run
from octlm.training.loop import train
from octlm.training.tracking import INSTALL, SCALARS, SIMILARITY_TAG, similarity_rgb

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

T = tiny.TINY_MODEL["context_length"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.write_corpus(tmp_path_factory.mktemp("corpus") / "text")


def config(root: Path, corpus: Path, position: str = "learned", **train: Any) -> Config:
    """The tiny run, 30 steps with an evaluation every 10, logging to TensorBoard."""
    settings: dict[str, Any] = {"checkpoint_interval": 10, "log": "tensorboard", **train}
    return config_from_dict(
        tiny.tiny_raw(root, corpus, model={"position": position}, **settings), name="tiny"
    )


def events(run_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(
        str(Run.of(run_dir).tensorboard_dir), size_guidance={"scalars": 0, "images": 0}
    )
    accumulator.Reload()
    return accumulator


def assert_scalars_match_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every scalar tag has one event per metrics.jsonl record, at its step, with its value as float32."""
    records = Run.of(run_dir).read_metrics()
    assert records
    acc = events(run_dir)
    assert set(SCALARS.values()) <= set(acc.Tags()["scalars"])
    for key, tag in SCALARS.items():
        scalars = acc.Scalars(tag)
        having = [r for r in records if key in r]  # step 0 has validation figures only
        assert [e.step for e in scalars] == [r["step"] for r in having], tag
        assert [e.value for e in scalars] == [float(np.float32(r[key])) for r in having], tag
    assert [e.step for e in acc.Scalars("loss/val")] == [r["step"] for r in records]
    return records


def decoded(image_event: Any) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(image_event.encoded_image_string)))


def test_scalars_and_learned_table_images_match_metrics(tmp_path: Path, corpus: Path) -> None:
    result = train(config(tmp_path, corpus), progress=False)
    records = assert_scalars_match_metrics(result.run_dir)
    assert [r["step"] for r in records] == [0, 10, 20, 30]
    assert [e.step for e in events(result.run_dir).Scalars("loss/train")] == [10, 20, 30]
    images = events(result.run_dir).Images(SIMILARITY_TAG)
    assert [e.step for e in images] == [0, 10, 20, 30]
    assert all((e.height, e.width) == (T, T) for e in images)
    pictures = [decoded(e) for e in images]
    assert all(p.shape == (T, T, 3) and p.dtype == np.uint8 for p in pictures)
    # The last image is the trained table's similarity, pixel for pixel (PNG is lossless).
    table = load_file(str(Run.of(result.run_dir).checkpoint_dir / "model.safetensors"))[
        "positions.table.weight"
    ]
    np.testing.assert_array_equal(pictures[-1], similarity_rgb(cosine_similarity_matrix(table).numpy()))
    assert not np.array_equal(pictures[0], pictures[-1])  # the table trained between evaluations


@pytest.mark.parametrize(("position", "images"), [("rope", 0), ("sinusoidal", 1)])
def test_schemes_without_a_trained_table(tmp_path: Path, corpus: Path, position: str, images: int) -> None:
    """RoPE has no position vectors, so no image; the fixed sinusoidal table is drawn once."""
    result = train(config(tmp_path, corpus, position), progress=False)
    assert_scalars_match_metrics(result.run_dir)
    acc = events(result.run_dir)
    assert len(acc.Images(SIMILARITY_TAG)) == images if images else SIMILARITY_TAG not in acc.Tags()["images"]


def test_resume_continues_the_events(tmp_path: Path, corpus: Path) -> None:
    """Stopped at step 15 and resumed: one event per record and tag, the same run as without logging."""
    plain = train(config(tmp_path, corpus, run_name="plain", log="none"), progress=False)
    assert not Run.of(plain.run_dir).tensorboard_dir.exists()
    cfg = config(tmp_path, corpus, run_name="split")
    first = train(cfg, progress=False, stop_after=15)
    assert first.interrupted
    assert [r["step"] for r in Run.of(first.run_dir).read_metrics()] == [0, 10, 15]
    assert [e.step for e in events(first.run_dir).Scalars("loss/val")] == [0, 10]  # not the stop's record
    second = train(cfg, first.run_dir, resume=True, progress=False)
    assert second.start_step == 15
    assert [r["step"] for r in assert_scalars_match_metrics(second.run_dir)] == [0, 10, 20, 30]
    assert [e.step for e in events(second.run_dir).Images(SIMILARITY_TAG)] == [0, 10, 20, 30]
    # Logging never touches a random generator: the weights equal the unlogged run's.
    a, b = (load_file(str(Run.of(r.run_dir).checkpoint_dir / "model.safetensors")) for r in (plain, second))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resume_after_a_crash_hides_the_events_after_the_checkpoint(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the evaluation of step 25 but with the last checkpoint at 20: the resume redoes step 25,
    and TensorBoard shows the redone events, as metrics.jsonl keeps the redone record."""
    cfg = config(tmp_path, corpus, eval_interval=5, checkpoint_interval=10)
    real, calls = octlm.training.loop.random_blocks, []

    def crashing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 27:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(octlm.training.loop, "random_blocks", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, progress=False)
    monkeypatch.setattr(octlm.training.loop, "random_blocks", real)
    run_dir = Run.default(cfg).path
    assert [e.step for e in events(run_dir).Scalars("loss/val")] == [0, 5, 10, 15, 20, 25]  # closed on error
    before = {e.step: e.value for e in events(run_dir).Scalars("tokens_per_second")}
    train(cfg, run_dir, resume=True, progress=False)
    records = assert_scalars_match_metrics(run_dir)
    assert [r["step"] for r in records] == [0, 5, 10, 15, 20, 25, 30]
    after = {e.step: e.value for e in events(run_dir).Scalars("tokens_per_second")}
    assert after[20] == before[20]  # kept from the first process (timings differ between processes)
    assert after[25] == float(np.float32(records[5]["tokens_per_second"]))  # the redone record's


def test_a_new_run_starts_new_events(tmp_path: Path, corpus: Path) -> None:
    cfg = config(tmp_path, corpus, steps=20)
    train(cfg, progress=False)
    result = train(cfg, progress=False, overwrite=True)
    records = assert_scalars_match_metrics(result.run_dir)
    assert [r["step"] for r in records] == [0, 10, 20]
    assert len(list(Run.of(result.run_dir).tensorboard_dir.iterdir())) == 1  # the old event file is gone


def test_missing_tensorboard_is_one_line_before_any_work(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # `import` now raises ImportError
    cfg = config(tmp_path, corpus)
    with pytest.raises(UserError, match="not installed") as error:
        train(cfg, progress=False)
    assert INSTALL in str(error.value) and "\n" not in str(error.value)
    assert (
        not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()
    )  # nothing prepared or written
    code, _, err = tiny.run_cli(["train", *tiny.tiny_flags(tmp_path, corpus, log="tensorboard")])
    assert code == 2 and INSTALL in err and not (tmp_path / "runs").exists()


def test_log_is_a_flag_validated_with_the_config_and_outside_its_hash(tmp_path: Path, corpus: Path) -> None:
    code, _, err = tiny.run_cli(["train", "--log", "wandb", *tiny.tiny_flags(tmp_path, corpus)])
    assert code == 2 and "train.log = 'wandb' is unknown; choose one of none, tensorboard" in err
    assert config(tmp_path, corpus).hash() == config(tmp_path, corpus, log="none").hash()
