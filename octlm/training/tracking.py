"""Experiment tracking: every evaluation record, also where users look (`train.log`).

metrics.jsonl (`octlm.storage.run`) stays the source of truth; a tracker mirrors each record it gets. With
`--log tensorboard`, rank 0 writes TensorBoard event files to the run's `tensorboard/` folder
(`tensorboard --logdir runs`):

- scalars at global step `record["step"]`, under the tags in `SCALARS` (train and validation loss, bits per
  byte, perplexity, learning rate, tokens/s);
- an image of the cosine similarity `[T, T]` of the position vectors (red +1, blue -1, as `octlm inspect`
  draws it) at every evaluation that changed them, for a scheme whose class `shows` vectors: every time for
  the learned table, once for the fixed sinusoidal one; schemes without position vectors
  (rope, alibi, t5, nope) have no image.

A resume continues the events: events after the checkpoint's step are hidden (`purge_step`), as
metrics.jsonl's records after it are cut. Step 0's record has validation scalars only; a stop's record
(`"stopped": true`, which a resume drops) is not mirrored. Tracking reads the weights and never draws a random
number, so it cannot change a run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from octlm.config import Config
from octlm.errors import UserError
from octlm.positions.formulas import cosine_similarity_matrix
from octlm.runtime import Dist
from octlm.storage.run import Run

SCALARS = {  # metrics.jsonl key -> TensorBoard tag
    "train_loss": "loss/train",
    "val_loss": "loss/val",
    "val_bpb": "bits_per_byte/val",
    "val_perplexity": "perplexity/val",
    "lr": "learning_rate",
    "tokens_per_second": "tokens_per_second",
}
SIMILARITY_TAG = "positions/cosine_similarity"
INSTALL = 'pip install "octlm[tensorboard]"'


class Tracker:
    """Takes each evaluation record. This one keeps nothing: `train.log = "none"`, and every rank but 0."""

    @contextlib.contextmanager
    def writing(self, start_step: int) -> Iterator[Tracker]:
        """Open for a training call that starts at `start_step`; closed on leaving, also on error."""
        yield self

    def record(self, record: dict[str, Any], model: torch.nn.Module) -> None:
        """One evaluation record (as appended to metrics.jsonl) and the model it scored."""


class TensorBoardTracker(Tracker):
    """Event files in `folder` through `torch.utils.tensorboard.SummaryWriter`."""

    def __init__(self, writer_class: type, folder: Path) -> None:
        self.writer_class = writer_class
        self.folder = folder
        self.writer: Any = None
        self.drawn: torch.Tensor | None = None  # the position vectors of the last image

    @contextlib.contextmanager
    def writing(self, start_step: int) -> Iterator[Tracker]:
        # TensorBoard hides events at steps >= purge_step; metrics.jsonl keeps the record of the checkpoint's
        # own step, so the events of that step stay too.
        purge_step = start_step + 1 if start_step > 0 else None
        try:
            self.writer = self.writer_class(log_dir=str(self.folder), purge_step=purge_step)
        except OSError as error:
            raise self._write_error(error) from None
        try:
            yield self
        finally:
            writer, self.writer = self.writer, None
            with contextlib.suppress(OSError):  # a failed final flush must not hide why training stopped
                writer.close()

    def record(self, record: dict[str, Any], model: torch.nn.Module) -> None:
        if record.get("stopped"):  # a stop's record: a resume drops it from metrics.jsonl, and purge_step
            return  # would keep its events (the checkpoint's step), so TensorBoard never gets it
        step = int(record["step"])
        try:
            for key, tag in SCALARS.items():
                if key in record:  # step 0's record has no training loss, learning rate or speed
                    self.writer.add_scalar(tag, float(record[key]), step)
            image = self._similarity_image(model)
            if image is not None:
                self.writer.add_image(SIMILARITY_TAG, image, step, dataformats="HWC")
            self.writer.flush()  # evaluations are rare: a live `tensorboard` sees each one
        except OSError as error:
            raise self._write_error(error) from None

    def _similarity_image(self, model: torch.nn.Module) -> np.ndarray | None:
        """`[T, T, 3]` uint8 of the position vectors' cosine similarity, or None (no vectors, or the same ones
        as last drawn)."""
        scheme = getattr(model, "positions", None)
        if scheme is None or "vectors" not in type(scheme).shows:
            return None
        with torch.no_grad():
            table = scheme.vectors(model.config.context_length).float().cpu()
        if self.drawn is not None and torch.equal(table, self.drawn):
            return None
        self.drawn = table
        return similarity_rgb(cosine_similarity_matrix(table).numpy())

    def _write_error(self, error: OSError) -> UserError:
        reason = error.strerror or str(error)
        return UserError(
            f"could not write TensorBoard events in {self.folder}: {reason}; free space or train without "
            "--log tensorboard (the run's metrics file keeps every record)"
        )


def similarity_rgb(sim: np.ndarray) -> np.ndarray:
    """A similarity matrix in [-1, 1] as an `[N, N, 3]` uint8 image in the report's colormap (RdBu_r)."""
    from matplotlib import colormaps

    rgba = colormaps["RdBu_r"](np.clip((sim + 1.0) / 2.0, 0.0, 1.0))
    return np.round(rgba[..., :3] * 255.0).astype(np.uint8)


def summary_writer_class() -> type:
    """`torch.utils.tensorboard.SummaryWriter`, or a one-line UserError saying how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError(
            f"train.log = 'tensorboard' needs the tensorboard package, which is not installed: {INSTALL}"
        ) from None
    return SummaryWriter


def make_tracker(config: Config, run: Run, dist: Dist) -> Tracker:
    """The tracker `config.train.log` names. Writes nothing yet, so it can be made before any work: every rank
    checks that the package is there (all fail alike), and only rank 0 gets one that writes."""
    if config.train.log == "none":
        return Tracker()
    writer_class = summary_writer_class()
    if not dist.main:
        return Tracker()
    return TensorBoardTracker(writer_class, run.tensorboard_dir)
