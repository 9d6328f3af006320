"""A run folder: the one place that knows its layout, its file names and how its records are read and written.

    <train.out_dir>/<name>/        name: train.run_name, or <config name>-<position>
        tokenizer.json             a copy of the tokenizer the run was trained with
        metrics.jsonl              one JSON record per evaluation
        checkpoint/                the last complete checkpoint (octlm.checkpoint writes it):
            model.safetensors      the weights
            optimizer.pt           the optimizer state
            config.json            schema version, step, config, RNG states, SHA-256 of everything
        .checkpoint-old/           the previous checkpoint, only for the moment of a swap (or after a crash)
        .checkpoint-tmp-<pid>/     a checkpoint being written
        report/                    what `octlm inspect` writes
        tensorboard/               TensorBoard event files, with `--log tensorboard` (octlm.tracking)

Every other module asks a `Run` for a path or a record instead of spelling a file name. Reading never executes
code: config.json and metrics.jsonl are JSON, and every problem is a UserError naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.config import Config, config_from_dict, load_config
from octlm.errors import UserError

SCHEMA_VERSION = 1
CHECKPOINT = "checkpoint"
OLD_CHECKPOINT = ".checkpoint-old"
TMP_PREFIX = ".checkpoint-tmp-"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
META_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.jsonl"
REPORT_DIR = "report"
TENSORBOARD_DIR = "tensorboard"


@dataclass(frozen=True)
class Run:
    """One run folder. Cheap to make: nothing is read until a method asks."""

    path: Path

    @classmethod
    def of(cls, path: str | Path) -> Run:
        return cls(Path(path))

    @classmethod
    def default(cls, config: Config) -> Run:
        """`<out_dir>/<run_name>`, or `<out_dir>/<config name>-<position>` when the config names no run."""
        name = config.train.run_name or f"{config.name}-{config.model.position}"
        return cls(Path(config.train.out_dir) / name)

    # --- layout -------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def old_checkpoint_dir(self) -> Path:
        return self.path / OLD_CHECKPOINT

    def tmp_checkpoint_dir(self, pid: int) -> Path:
        return self.path / f"{TMP_PREFIX}{pid}"

    def stale_tmp_dirs(self) -> Iterator[Path]:
        """Checkpoint folders left half-written by a crash: never complete, safe to delete."""
        return self.path.glob(TMP_PREFIX + "*")

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def report_dir(self) -> Path:
        return self.path / REPORT_DIR

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD_DIR

    def has_checkpoint(self) -> bool:
        """A checkpoint folder (complete or not) is there: a new run must not start over it by accident."""
        return self.checkpoint_dir.is_dir() or self.old_checkpoint_dir.is_dir()

    def find_checkpoint(self) -> Path:
        """The folder of the last complete checkpoint, or a UserError saying why there is none."""
        run_dir = self.path
        if not run_dir.exists():
            raise UserError(f"run folder {str(run_dir)!r} does not exist; train one with `octlm train`")
        if not run_dir.is_dir():
            raise UserError(f"{str(run_dir)!r} is a file, not a run folder (runs/<name>/)")
        for folder in (self.checkpoint_dir, self.old_checkpoint_dir):
            if (folder / META_FILE).is_file():
                return folder
        if self.checkpoint_dir.is_dir():
            raise UserError(f"{str(self.checkpoint_dir)!r} has no {META_FILE}; the checkpoint is incomplete")
        if self.metrics_path.is_file() or self.tokenizer_path.is_file():
            raise UserError(
                f"run {str(run_dir)!r} has no checkpoint yet (it stopped before its first one); "
                "train it again with `octlm train`"
            )
        raise UserError(
            f"{str(run_dir)!r} is not an octlm run folder (no {CHECKPOINT}/ inside); "
            "pass a folder made by `octlm train`, e.g. runs/day1-learned"
        )

    # --- config.json --------------------------------------------------------------------------------------
    def read_meta(self, folder: Path | None = None) -> dict[str, Any]:
        """The last checkpoint's config.json (or `folder`'s), checked for the entries every reader needs."""
        return read_meta(folder or self.find_checkpoint())

    def config_for_resume(self, overrides: dict[str, Any], config_path: str | None = None) -> Config:
        """The run's own config plus `overrides` (or, with `config_path`, that file plus overrides)."""
        if config_path is not None:
            return load_config(config_path, overrides)
        meta = self.read_meta()
        return config_from_dict(
            meta["config"], name=str(meta.get("config_name", "custom")), overrides=overrides
        )

    # --- metrics.jsonl ------------------------------------------------------------------------------------
    def reset_metrics(self) -> None:
        """An empty metrics file: a new run starts its record."""
        self.metrics_path.write_text("", encoding="utf-8")

    def append_metrics(self, record: dict[str, Any]) -> None:
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every readable record, in order; lines that are not JSON objects are skipped."""
        try:
            lines = self.metrics_path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def last_metrics(self) -> dict[str, Any]:
        """The last record (empty when there is none)."""
        records = self.read_metrics()
        return records[-1] if records else {}

    def truncate_metrics(self, up_to_step: int) -> None:
        """Keep the records of steps <= up_to_step: evaluations after a checkpoint are redone by the resume."""
        if not self.metrics_path.is_file():
            return
        kept = [r for r in self.read_metrics() if _step_of(r) <= up_to_step]
        tmp = self.metrics_path.with_name(f".{METRICS_FILE}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        tmp.replace(self.metrics_path)


def _step_of(record: dict[str, Any]) -> float:
    step = record.get("step", 0)
    return step if isinstance(step, (int, float)) else float("inf")


def read_meta(folder: Path) -> dict[str, Any]:
    """A checkpoint folder's config.json: a JSON object with a known schema, a step, a config, hashes."""
    path = folder / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise UserError(
            f"{str(path)!r} is unreadable or not valid JSON ({error}); the checkpoint is corrupt"
        ) from None
    if not isinstance(meta, dict):
        raise UserError(f"{str(path)!r} is not a checkpoint description (expected a JSON object)")
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise UserError(f"{str(path)!r} has no schema_version; it was not written by octlm")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{str(path)!r} has schema_version {version}, newer than this octlm reads ({SCHEMA_VERSION}); "
            "upgrade octlm to load it"
        )
    if version < 1:
        raise UserError(f"{str(path)!r} has an invalid schema_version {version}")
    for key, kind in (("step", int), ("config", dict), ("sha256", dict)):
        if not isinstance(meta.get(key), kind):
            raise UserError(f"{str(path)!r} has no valid {key!r} entry; the checkpoint is corrupt")
    return meta


def write_meta(folder: Path, meta: dict[str, Any]) -> Path:
    """Write config.json into a checkpoint folder being built (the caller fsyncs and swaps it in)."""
    path = folder / META_FILE
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    return path
