"""The position probe (octlm/inspect/probe.py): its solvers against independent computations, its controls, its hooks,
and `octlm probe` on a real tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from octlm.cli import main
from octlm.config import ModelConfig, config_from_dict
from octlm.inspect import probe
from octlm.model.decoder import Decoder


def tiny_decoder(position: str, n_layers: int = 2, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    config = ModelConfig(
        vocab_size=300,
        d_model=32,
        context_length=16,
        n_layers=n_layers,
        n_heads=2,
        d_ff=64,
        position=position,
    )
    return Decoder(config).eval()


def test_ridge_matches_numpy_least_squares() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 7)) * rng.uniform(0.1, 10, size=7) + rng.normal(size=7)
    y = x @ rng.normal(size=7) + 3.0 + rng.normal(size=300)
    for alpha in (0.0, 1e-3, 0.7, 50.0):
        w, b = probe.ridge_fit(x, y, alpha)
        # Independent: min ||[x 1] [w; b] - y||² + N alpha ||w||² as one augmented least-squares problem
        n, c = x.shape
        design = np.block([[x, np.ones((n, 1))], [np.sqrt(n * alpha) * np.eye(c), np.zeros((c, 1))]])
        solution = np.linalg.lstsq(design, np.concatenate([y, np.zeros(c)]), rcond=None)[0]
        assert np.abs(w - solution[:c]).max() < 1e-8 and abs(b - solution[c]) < 1e-8  # measured 5e-15


def test_r2_and_alpha_choice() -> None:
    y = np.array([0.0, 1.0, 2.0, 3.0])
    assert probe.r2_score(y, y) == 1.0 and probe.r2_score(y, np.full(4, 1.5)) == 0.0
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 5))
    groups = np.repeat(np.arange(20), 20)
    # Pure noise targets: every penalty is as bad, the largest is kept; a clean signal wants the smallest.
    assert probe.choose_alpha(x, rng.normal(size=400), groups, rng) >= 1.0
    assert probe.choose_alpha(x, x @ np.arange(1.0, 6.0), groups, rng) == probe.ALPHAS[0]


def test_logistic_fit_is_at_the_optimum() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 6))
    labels = (x @ rng.normal(size=(6, 3)) + rng.normal(size=(500, 3))).argmax(1)
    w, b = probe.logistic_fit(x, labels, 3, penalty=1e-2)
    # Independent: the gradient of mean cross-entropy + penalty ||W||², in NumPy, vanishes at the minimum.
    logits = x @ w + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(500), labels] -= 1.0
    grad_w, grad_b = x.T @ p / 500 + 2e-2 * w, p.mean(0)
    assert np.abs(grad_w).max() < 1e-6 and np.abs(grad_b).max() < 1e-6  # measured 1.1e-8


def test_classifier_recovers_a_planted_signal_and_scores_chance_on_noise() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3000, 10))
    planted = (x @ rng.normal(size=(10, 4))).argmax(1)
    noise = rng.integers(0, 4, size=3000)
    for labels, low, high in ((planted, 0.97, 1.0), (noise, 0.2, 0.3)):
        w, b = probe.logistic_fit(x[:2000], labels[:2000], 4)
        accuracy = ((x[2000:] @ w + b).argmax(1) == labels[2000:]).mean()
        assert low <= accuracy <= high, accuracy  # measured 0.983 (planted) and 0.248 (noise; chance 0.25)


def test_shuffled_control_is_near_chance_where_position_is_plain() -> None:
    rng = np.random.default_rng(4)
    windows, length = 100, 64
    one_hot = np.eye(length)[None].repeat(windows, 0)  # [W, T, T]: each token's vector names its position
    x = np.concatenate([one_hot, 0.1 * rng.normal(size=(windows, length, 4))], axis=-1)
    train, test = probe.split_windows(windows, seed=0)
    result = probe.probe_layer(x, length, train, test, buckets=8, seed=0)
    assert result["ridge"]["r2"] > 0.999 and result["ridge"]["mae"] < 0.5  # measured 1 - 1e-12, 2e-5
    assert result["bucket"]["accuracy"] == 1.0 and result["chance"] == 0.125
    assert abs(result["ridge_control"]["r2"]) < 0.05  # measured 0.015
    assert abs(result["ridge_control"]["mae"] - 16.0) < 1.5  # measured 15.8; the mean's MAE is T/4 = 16
    assert abs(result["bucket_control"]["accuracy"] - 0.125) < 0.06  # measured 0.101


def test_hooks_capture_every_layer_as_the_model_computes_it() -> None:
    for position in ("learned", "alibi", "rope"):
        model = tiny_decoder(position)
        ids = torch.randint(0, 300, (3, 16), generator=torch.Generator().manual_seed(5))
        captured = probe.capture_layers(model, ids)
        assert len(captured) == model.config.n_layers + 1
        with torch.no_grad():  # the model's parts, by hand
            positions = torch.arange(16)
            x = model.positions.embed(model.token_embedding(ids), positions)
            expected = [x]
            mask, causal = model._attention_mask(positions, positions)
            for layer, block in enumerate(model.blocks):
                x = block(x, positions, model.positions, mask, causal, None, layer)
                expected.append(x)
        for got, want in zip(captured, expected, strict=True):
            assert got.shape == (3, 16, 32) and torch.equal(got, want)
        assert not model.blocks[0]._forward_pre_hooks and not model.blocks[-1]._forward_hooks  # removed
        vectors = probe.features(model, ids.numpy(), batch=2)
        assert vectors.shape == (3, 3, 16, 32)
        assert np.array_equal(vectors.reshape(3, -1, 32), torch.stack(captured).reshape(3, -1, 32).numpy())


def test_dominant_learned_positions_are_read_off_the_embedding_layer() -> None:
    tokens = np.random.default_rng(6).integers(0, 300, size=16 * 24)
    learned = tiny_decoder("learned", n_layers=1)
    with torch.no_grad():
        learned.token_embedding.weight.mul_(1e-3)  # the position rows dominate the embedding output
        learned.positions.table.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(7))
    first = probe.probe_model(learned, tokens, windows=24)["layers"][0]
    assert first["layer"] == "embedding"
    assert first["ridge"]["r2"] > 0.999 and first["bucket"]["accuracy"] == 1.0  # measured 1 - 3e-10, 1.0
    assert first["bucket_control"]["accuracy"] < 0.35  # measured 0.1875 (chance 0.125; 96 test tokens)
    # NoPE's embedding output is the token vector alone: nothing there to read a position from.
    nope = probe.probe_model(tiny_decoder("nope", n_layers=1), tokens, windows=24)["layers"][0]
    assert nope["ridge"]["r2"] < 0.05 and nope["bucket"]["accuracy"] < 0.3  # measured -0.0007, 0.104


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from octlm.training.loop import train

    root = tmp_path_factory.mktemp("probe-run")
    corpus = root / "corpus"
    corpus.mkdir()
    for i in range(40):
        (corpus / f"f{i}.py").write_text(f"def f{i}(self, x):\n    return x + {i} * self.y\n\n" * 3)
    config = config_from_dict(
        {
            "model": {
                "vocab_size": 300,
                "d_model": 32,
                "context_length": 16,
                "n_layers": 1,
                "n_heads": 2,
                "d_ff": 64,
                "position": "nope",
            },
            "data": {"source": "text", "text": [str(corpus)], "data_dir": str(root / "data")},
            "train": {
                "steps": 10,
                "batch_size": 8,
                "warmup_steps": 2,
                "eval_interval": 10,
                "eval_batches": 1,
                "checkpoint_interval": 10,
                "sample_tokens": 0,
                "device": "cpu",
                "report": False,
            },
        },
        name="tiny",
    )
    train(config, root / "runs" / "tiny-nope", progress=False)
    return root / "runs" / "tiny-nope"


def test_probe_command_writes_table_figure_and_json(run_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["probe", str(run_dir), "--out", str(tmp_path / "out"), "--buckets", "4"]) == 0
    printed = capsys.readouterr().out
    assert "embedding" in printed and "block 1" in printed and "probe.md" in printed
    lines = printed.splitlines()
    assert lines[1] == "  layer          R²    MAE  R² ctl    acc acc ctl  chance"
    assert lines[4] == (  # under the table, what its columns are
        "  R², MAE: the ridge probe's fit of the position; acc: the bucket probe's accuracy; ctl: the same "
        "probe trained on shuffled positions (a layer knows position where it beats its ctl)"
    )
    numbers = json.loads((tmp_path / "out" / "probe.json").read_text(encoding="utf-8"))
    assert [x["layer"] for x in numbers["layers"]] == ["embedding", "block 1"]
    assert (
        numbers["run"] == "tiny-nope" and numbers["buckets"] == 4 and numbers["layers"][0]["chance"] == 0.25
    )
    markdown = (tmp_path / "out" / "probe.md").read_text(encoding="utf-8")
    assert "| block 1 |" in markdown and "(probe.png)" in markdown
    assert (tmp_path / "out" / "probe.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["probe", str(run_dir)]) == 0  # the default folder, named by octlm/storage/run.py
    assert {p.name for p in (run_dir / "report" / "probe").iterdir()} == {
        "probe.md",
        "probe.json",
        "probe.png",
    }


def test_inspect_report_holds_the_probe_section(run_dir: Path, tmp_path: Path) -> None:
    from octlm.inspect.report import Progress, write_report

    progress = Progress()
    folder, _ = write_report(run_dir, out=tmp_path / "report", probe=True, progress=progress)
    assert (
        progress.steps
        == [  # what `octlm inspect` shows on a terminal as it goes: the probe one layer a step
            "loading the run",
            "counting the training tokens",
            "comparing the tables with an untrained model",
            "position probe: embedding",
            "position probe: block 1",
            "attention by distance",
            "drawing the figures, writing the report",
        ]
    )
    assert "## What each layer knows of position" in (folder / "report.md").read_text(encoding="utf-8")
    assert (folder / "probe" / "probe.png").is_file()
    assert (
        json.loads((folder / "report.json").read_text(encoding="utf-8"))["probe"]["layers"][1]["layer"]
        == "block 1"
    )
    plain, _ = write_report(run_dir, out=tmp_path / "plain")  # the library default (and `--no-probe`): none
    plain_md = (plain / "report.md").read_text(encoding="utf-8")
    assert "## What each layer knows of position" not in plain_md and "probe" not in plain_md.lower()
    assert not (plain / "probe").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/notarun"], "is not an octlm run folder"),
        (["{tmp}/missing"], "does not exist"),
        (["{run}", "--out", "{tmp}/afile"], "--out '{tmp}/afile' is a file, not a folder"),
        (["{run}", "--out", "{tmp}/o", "--text", "{tmp}/short.txt"], "needs at least 4 windows of 16 tokens"),
        (["{run}", "--out", "{tmp}/o", "--text", "{tmp}/bad.txt"], "is not UTF-8 text"),
        (["{run}", "--windows", "3"], "--windows: 3 is outside [4, 100000]"),
    ],
)
def test_probe_refuses_in_one_line(
    run_dir: Path, tmp_path: Path, capsys, args: list[str], message: str
) -> None:
    (tmp_path / "notarun").mkdir()
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "short.txt").write_text("def f(x): return x\n")
    (tmp_path / "bad.txt").write_bytes(b"def \xff\n" * 40)
    fill = {"tmp": str(tmp_path), "run": str(run_dir)}
    assert main(["probe", *(a.format(**fill) for a in args)]) == 2
    error = capsys.readouterr().err
    assert message.format(**fill) in error and error.count("\n") == 1 and "Traceback" not in error
    assert not (tmp_path / "o").exists()
