"""Tiny trained runs for the analysis commands' tests (octlm score, octlm compare): two layers, two heads,
context 16, ten steps on a small corpus of Python-like lines, in a few seconds each."""

from __future__ import annotations

from pathlib import Path

from octlm.config import config_from_dict


def write_corpus(folder: Path, files: int = 40, offset: int = 0) -> Path:
    """`files` small ASCII files (deterministic); `offset` changes the text, so the corpus hash differs."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        k = i + offset
        (folder / f"f{i}.py").write_text(f"def f{k}(self, x):\n    return x + {k} * self.y\n\n" * 3)
    return folder


def train_tiny(root: Path, scheme: str, seed: int = 0, corpus: Path | None = None, steps: int = 10) -> Path:
    """Train a tiny `scheme` run under `root/runs/tiny-<scheme>-<seed>` and return its folder."""
    from octlm.training.loop import train

    corpus = corpus or write_corpus(root / "corpus")
    config = config_from_dict(
        {
            "model": {
                "vocab_size": 300,
                "d_model": 32,
                "context_length": 16,
                "n_layers": 2,
                "n_heads": 2,
                "d_ff": 64,
                "position": scheme,
            },
            "data": {"source": "text", "text": [str(corpus)], "data_dir": str(root / "data")},
            "train": {
                "steps": steps,
                "batch_size": 8,
                "warmup_steps": 2,
                "eval_interval": 5,
                "eval_batches": 1,
                "checkpoint_interval": steps,
                "sample_tokens": 0,
                "device": "cpu",
                "report": False,
                "seed": seed,
            },
        },
        name="tiny",
    )
    folder = root / "runs" / f"tiny-{scheme}-{seed}"
    train(config, folder, progress=False)
    return folder
