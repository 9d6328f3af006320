"""`octlm inspect`: the diagnostic means something, and the report it writes is complete.

The first test is the proof: a tiny model trained on a corpus with planted structure (tokens in
interchangeable pairs) must find each token's partner as its nearest neighbour, with the same function the
report uses, and an untrained model must not (chance level). The rest check the numbers, the files and the
errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from octlm.cli import main
from octlm.config import ModelConfig, config_from_dict
from octlm.data.cache import prepare_data
from octlm.data.sources import Document
from octlm.data.tokenizer import train_tokenizer
from octlm.errors import UserError
from octlm.inspect import analysis, report, similarity
from octlm.inspect.render import render_markdown
from octlm.model.decoder import Decoder
from octlm.positions.formulas import sinusoidal_table
from octlm.storage.checkpoint import load_model


def partner_hits(table: object, partner: dict[int, int]) -> int:
    """How many ids in `partner` have their partner as nearest neighbour in `table` `[V, C]`, by the report's
    own nearest-token function."""
    ids = sorted(partner)
    firsts = similarity.cosine_neighbours(table, ids, 1)
    return sum(1 for i, nb in zip(ids, firsts, strict=True) if nb and nb[0][0] == partner[i])


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------------------
# The proof: planted pairs


def planted_corpus(classes: int, length: int, seed: int) -> np.ndarray:
    """Token ids `[length]` from a random walk over `classes` contexts; class c emits 2c or 2c + 1 at random.

    Each class has three possible successors, so classes differ in what precedes and follows them, while the
    two tokens of a class are used in exactly the same contexts: interchangeable, as synonyms are.
    """
    rng = np.random.default_rng(seed)
    successors = np.stack([rng.choice(classes, 3, replace=False) for _ in range(classes)])
    walk = np.empty(length, dtype=np.int64)
    walk[0] = 0
    steps = rng.integers(3, size=length)
    for i in range(1, length):
        walk[i] = successors[walk[i - 1], steps[i]]
    return 2 * walk + rng.integers(2, size=length)


def test_planted_pairs_are_each_others_nearest_neighbours() -> None:
    classes = 20
    vocab = 2 * classes
    partner = {i: i ^ 1 for i in range(vocab)}  # 2c <-> 2c + 1
    tokens = torch.from_numpy(planted_corpus(classes, 40_000, seed=0))
    config = ModelConfig(vocab_size=vocab, d_model=32, context_length=16, n_layers=1, n_heads=2, d_ff=64)
    torch.manual_seed(0)
    model = Decoder(config)

    def hits() -> int:
        table = model.token_embedding.weight.detach()
        firsts = analysis.nearest_tokens(table, list(range(vocab)), k=1)
        return sum(1 for i, nb in enumerate(firsts) if nb[0][0] == partner[i])

    untrained = hits()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(80):
        starts = torch.randint(0, len(tokens) - 17, (32,), generator=generator)
        batch = torch.stack([tokens[s : s + 17] for s in starts])
        _, loss = model(batch[:, :-1], batch[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    trained = hits()

    # Chance: a random row's nearest of 39 others is its partner with probability 1/39, so about 1 of 40.
    assert untrained <= 5, f"untrained model already finds {untrained}/40 partners; the test proves nothing"
    assert trained >= 38, f"trained model finds only {trained}/40 partners as nearest neighbours"
    assert partner_hits(model.token_embedding.weight, partner) == trained


# ------------------------------------------------------------------------------------------------------------
# Pure functions


def test_cosine_neighbours_skip_self_and_sort_by_similarity() -> None:
    table = torch.tensor([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    (first,) = analysis.nearest_tokens(table, [0], k=3)
    assert [j for j, _ in first] == [4, 1, 3]  # row 4 is parallel (cos 1), row 0 itself is skipped
    assert first[0][1] == pytest.approx(1.0)
    assert first[2][1] == pytest.approx(0.0)
    (everything,) = analysis.nearest_positions(table, [2], k=99)
    assert len(everything) == 4 and everything[-1][1] == pytest.approx(-1.0)
    with pytest.raises(UserError, match="outside"):
        analysis.nearest_tokens(table, [5], k=1)


def test_pca_finds_a_planted_plane() -> None:
    rng = np.random.default_rng(0)
    plane = rng.normal(size=(2, 16))
    rows = rng.normal(size=(50, 2)) * [3.0, 1.0] @ plane + 1e-3 * rng.normal(size=(50, 16))
    coords, explained = analysis.pca_2d(rows)
    assert coords.shape == (50, 2)
    assert explained.sum() == pytest.approx(1.0, abs=1e-4) and explained[0] > explained[1]
    assert np.allclose(coords.mean(axis=0), 0.0, atol=1e-9)
    # The coordinates lie in the planted plane: against an orthonormal basis of the plane, the coordinates
    # are the centred rows' own coordinates in the plane, up to a rotation or reflection (measured: R orthogonal
    # within 5e-8, residual 1.5e-6, from the 1e-3 noise off the plane).
    centred = rows - rows.mean(axis=0)
    basis, _ = np.linalg.qr(plane.T)  # [16, 2], orthonormal, spanning the planted plane
    in_plane = centred @ basis  # [50, 2]
    # coords = in_plane @ R for a 2x2 rotation or reflection R, found by least squares and checked orthogonal.
    r, *_ = np.linalg.lstsq(in_plane, coords, rcond=None)
    np.testing.assert_allclose(r.T @ r, np.eye(2), rtol=0, atol=1e-6)
    assert np.linalg.norm(in_plane @ r - coords) < 1e-5
    # And they equal an independent projection on NumPy's first two right singular vectors, up to each sign.
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    expected = centred @ vt[:2].T
    signs = np.sign((coords * expected).sum(axis=0))
    np.testing.assert_allclose(coords, expected * signs, rtol=0, atol=1e-9)


def test_counts_ranking_and_distance_profile() -> None:
    stream = np.array([3, 3, 3, 1, 1, 0, 5], dtype=np.uint16)
    counts = analysis.token_counts(stream, 8, chunk=2)
    assert counts.tolist() == [1, 2, 0, 3, 0, 1, 0, 0]
    assert analysis.most_frequent(counts, 10) == [3, 1, 0, 5]  # unseen ids are never "frequent"
    with pytest.raises(UserError, match="outside the vocabulary"):
        analysis.token_counts(stream, 4)
    # The sinusoidal table's similarity depends only on the distance, so every diagonal is constant.
    sim = analysis.similarity_matrix(sinusoidal_table(32, 16))
    profile = analysis.similarity_by_distance(sim, [0, 1, 5, 31, 32])
    assert list(profile) == [0, 1, 5, 31] and profile[0] == pytest.approx(1.0)
    assert np.allclose(np.diagonal(sim, 5), profile[5], atol=1e-5)
    assert analysis.probe_positions(128) == [0, 1, 64, 127]


# ------------------------------------------------------------------------------------------------------------
# Schemes without position vectors say what they have instead (in memory, no figures drawn)


@pytest.fixture(scope="module")
def tiny_tokenizer():
    docs = [Document(f"d{i}", f"def f{i}(self, x):\n    return x + {i}\n") for i in range(30)]
    tokenizer = train_tokenizer(docs, 300)
    stream = np.concatenate([tokenizer.encode(d.text) + [tokenizer.eot_id] for d in docs])
    return tokenizer, analysis.token_counts(stream, 300)


def tiny_model(position: str, seed: int, tie: bool = True) -> Decoder:
    torch.manual_seed(seed)
    config = ModelConfig(
        vocab_size=300,
        d_model=32,
        context_length=16,
        n_layers=1,
        n_heads=2,
        d_ff=64,
        position=position,
        tie_embeddings=tie,
    )
    return Decoder(config)


@pytest.mark.parametrize(
    ("position", "says"),
    [
        (
            "sinusoidal",
            [
                "The fixed sinusoidal table of Vaswani",
                "Nearest positions, trained",
                "position vectors are fixed: training does not change them",
                "(fixed: trained = untrained)",
            ],
        ),
        ("rope", ["RoPE (Su et al.)", "wavelength 2π/θ_i", "| 0 | 1 | 6.3 |", "For reference only"]),
        (
            "alibi",
            ["ALiBi: a fixed penalty", "| head | d = 1 |", "| 0 | -0.062 |", "fixed (training does not"],
        ),
        ("t5", ["T5's relative bias", "| head | d = 1 |", "trained, "]),
        ("nope", ["NoPE: no position signal", "It has no position parameters to show", "For reference only"]),
        (
            "fox",
            [
                "FoX: every token sets a forget gate",
                "Its forget gates are set by the text: the section Forget gates measures them on it.",
                "For reference only",
            ],
        ),
    ],
)
def test_every_scheme_says_what_its_class_shows(position: str, says: list[str], tiny_tokenizer) -> None:
    tokenizer, counts = tiny_tokenizer
    rep = analysis.analyze(tiny_model(position, 1), tiny_model(position, 2), tokenizer, counts, run="tiny")
    figures = {
        name: Path(f"/r/{name}.png") for name in ("positions", "position_scheme", "tokens_pca", "norms")
    }
    text = render_markdown(report.report_blocks(rep, figures), Path("/r"))
    for phrase in says:
        assert phrase in text
    assert ("forget gates" in text) == (position == "fox")
    if position == "fox":  # the sentence whole, between the class's words and the end
        assert rep["positions"]["summary"].endswith(
            ". Its forget gates are set by the text: the section Forget gates measures them on it."
        )
    pos = rep["positions"]
    assert pos["has_vectors"] == (position == "sinusoidal") and "untrained" not in pos
    json.dumps(analysis.to_json(rep))  # every number is plain JSON
    if position == "t5":  # learned: the untrained model's bias is beside the trained one's, [H, T]
        assert pos["bias"]["trained"].shape == pos["bias"]["untrained"].shape == (2, 16)


def test_untied_unseen_rows_stay_put_and_missing_counts_are_said(tiny_tokenizer) -> None:
    tokenizer, counts = tiny_tokenizer
    model, initial = tiny_model("learned", 1, tie=False), tiny_model("learned", 1, tie=False)
    with torch.no_grad():
        model.token_embedding.weight[counts > 0] += 1.0  # "training" touches only the seen rows
    rep = analysis.analyze(model, initial, tokenizer, counts)
    unseen = rep["unseen"]
    assert unseen["unseen"]["tokens"] == int((counts == 0).sum()) > 0
    assert unseen["unseen"]["mean_relative_change"] == 0.0
    assert unseen["seen"]["mean_relative_change"] > 1.0
    assert unseen["expected_init_norm"] == pytest.approx(0.02 * 32**0.5)

    blind = analysis.analyze(model, initial, tokenizer, None)
    assert "unseen" not in blind and any("ranked by id" in note for note in blind["notes"])
    assert blind["tokens"][:3] == [0, 1, 2]


def test_training_counts_fall_back_when_the_data_is_gone(tmp_path: Path, tiny_tokenizer) -> None:
    config = config_from_dict({"data": {"source": "text", "text": [str(tmp_path / "gone")]}})
    counts, why = report.training_counts(config, tiny_tokenizer[0])
    assert counts is None and "could not be loaded" in why


# ------------------------------------------------------------------------------------------------------------
# A real (tiny) run: `octlm.training.loop.train` writes it and `octlm train` calls write_report at the end


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from octlm.commands.train import finish
    from octlm.training.loop import train

    root = tmp_path_factory.mktemp("report-run")
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
                "position": "learned",
            },
            "data": {"source": "text", "text": [str(corpus)], "data_dir": str(root / "data")},
            "train": {
                "steps": 20,
                "batch_size": 8,
                "warmup_steps": 2,
                "eval_interval": 10,
                "eval_batches": 2,
                "checkpoint_interval": 20,
                "sample_tokens": 0,
                "device": "cpu",
                "report": True,
            },
        },
        name="tiny",
    )
    torch.set_num_threads(1)
    result = train(config, root / "runs" / "tiny-learned", progress=False)
    assert finish(config, result) == ("", root / "runs" / "tiny-learned" / "report")
    return root / "runs" / "tiny-learned"


def assert_png(path: Path) -> None:
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0.01, f"{path.name} is blank"


def test_train_writes_the_report(run_dir: Path) -> None:
    folder = run_dir / "report"
    names = {
        "report.md",
        "report.html",
        "report.json",
        "embeddings.json",
        "positions.png",
        "tokens_pca.png",
        "norms.png",
    }
    assert names <= {p.name for p in folder.iterdir()}
    for png in folder.glob("*.png"):
        assert_png(png)

    numbers = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert numbers["run"] == "tiny-learned" and numbers["step"] == 20 and numbers["counts_available"]
    assert numbers["tokens"][0] == 0 and len(numbers["tokens"]) == 1 + analysis.DEFAULT_FREQUENT
    counts = np.array(numbers["counts"])
    data = prepare_data(load_model(run_dir)[1].data, 300, progress=False)  # the cache train made
    assert counts.shape == (300,) and counts.sum() == len(data.train)
    assert counts[0] == data.train_documents  # one EOT per document
    ranked = numbers["tokens"][1:]
    assert all(counts[a] >= counts[b] for a, b in zip(ranked, ranked[1:], strict=False))
    for name in ("trained", "untrained"):
        neighbours = numbers[name]["neighbours"]["0"]
        assert len(neighbours) == analysis.DEFAULT_TOP and all(-1 <= s <= 1 for _, s in neighbours)
        assert len(numbers[name]["norms"]) == 300
    assert numbers["trained"]["mean_top1_similarity"] > numbers["untrained"]["mean_top1_similarity"]
    pos = numbers["positions"]
    assert np.array(pos["trained"]["similarity"]).shape == (16, 16)
    assert list(pos["trained"]["neighbours"]) == ["0", "1", "8", "15"]
    assert numbers["unseen"]["unseen"]["tokens"] == int((counts == 0).sum())
    assert numbers["labels"]["0"] == "'<|endoftext|>'"

    markdown = (folder / "report.md").read_text(encoding="utf-8")
    assert "(positions.png)" in markdown
    assert f"| `'<\\|endoftext\\|>'` | 0 | {counts[0]} |" in markdown
    page = (folder / "report.html").read_text(encoding="utf-8")
    # positions, tokens_pca, norms and attention.png (octlm/inspect/attention.py)
    assert page.count("data:image/png;base64,") == 4 and 'src="positions.png"' not in page
    attention = numbers["attention"]  # 16 validation windows of the context length, one layer, two heads
    assert (attention["windows"], attention["length"]) == (16, 16)
    assert numbers["figures"]["attention"] == "attention.png"
    assert np.array(attention["lift"]).shape == (1, 2, 16) and np.array(attention["entropy"]).shape == (1, 2)
    assert "## Attention by distance" in markdown


def test_embeddings_json_matches_web_data_md(run_dir: Path) -> None:
    data = json.loads((run_dir / "report" / "embeddings.json").read_text(encoding="utf-8"))
    assert set(data) == {
        "schema",
        "run",
        "position",
        "d_model",
        "tokens",
        "token_table",
        "position_similarity",
    }
    assert data["schema"] == 1 and data["run"] == "tiny-learned" and data["position"] == "learned"
    assert data["d_model"] == 32
    assert all(set(t) == {"id", "text", "count"} and t["count"] > 0 for t in data["tokens"])
    assert len(data["token_table"]) == len(data["tokens"]) and {len(r) for r in data["token_table"]} == {32}
    assert all(round(x, 5) == x for x in data["token_table"][0])
    assert np.array(data["position_similarity"]).shape == (16, 16)


def test_inspect_cli(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    web = tmp_path / "web" / "public" / "data" / "embeddings.json"
    args = [
        "inspect",
        str(run_dir),
        "--tokens",
        " x",
        "self",
        "--ids",
        "0",
        "--top",
        "3",
        "--out",
        str(tmp_path / "out"),
        "--export-web",
        str(web),
    ]
    assert main(args) == 0
    printed, err = capsys.readouterr()
    assert "' x'" in printed and "report:" in printed
    assert err == ""  # stderr is no terminal here: no progress
    numbers = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert len(numbers["tokens"]) == 3 and numbers["tokens"][2] == 0
    assert all(len(nb) == 3 for nb in numbers["trained"]["neighbours"].values())
    assert web.read_bytes() == (tmp_path / "out" / "embeddings.json").read_bytes()


def test_inspect_errors(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(run_dir), "--tokens", " xyzzy"]) == 2
    error = capsys.readouterr().err
    assert "' xyzzy' is not a single token: it encodes to" in error and "(id " in error
    (tmp_path / "notarun").mkdir()
    assert main(["inspect", str(tmp_path / "notarun")]) == 2
    assert "not an octlm run folder" in capsys.readouterr().err
    with pytest.raises(UserError, match="does not exist"):
        report.write_report(tmp_path / "missing")


def test_rope_report_files(tmp_path: Path, tiny_tokenizer) -> None:
    tokenizer, counts = tiny_tokenizer
    rep = analysis.analyze(tiny_model("rope", 1), tiny_model("rope", 2), tokenizer, counts, run="tiny-rope")
    model = tiny_model("rope", 1)
    folder, _ = report.write_files(rep, model, tokenizer, tmp_path)
    assert_png(folder / "position_scheme.png")
    data = json.loads((folder / "embeddings.json").read_text(encoding="utf-8"))
    assert data["position"] == "rope" and data["position_similarity"] is None


def test_progress_is_one_line_redrawn_per_step() -> None:
    import io
    import re

    drawn = io.StringIO()
    with report.Progress(show=True, file=drawn) as progress:
        progress.plan(2)
        progress.start("loading the run")
        progress.start("attention by distance")
    frames = [re.sub(r"\d\d:\d\d\)", "mm:ss)", f) for f in drawn.getvalue().split("\r")]
    assert frames == [
        "",
        "inspect:  (0/? done, mm:ss)",
        "inspect:  (0/2 done, mm:ss)",
        "inspect: loading the run (0/2 done, mm:ss)",
        "inspect: attention by distance (1/2 done, mm:ss)",
        " " * len("inspect: attention by distance (1/2 done, mm:ss)"),  # cleared when done
        "",
    ]
    assert progress.steps == ["loading the run", "attention by distance"]


def test_inspect_shows_its_steps_on_a_terminal(run_dir: Path, tmp_path: Path) -> None:
    """`octlm inspect` with stderr on a real terminal (a pseudo-terminal of 100 columns) draws its steps."""
    import fcntl
    import os
    import struct
    import subprocess
    import termios

    from tiny import PYTHON, quiet_env

    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    argv = [PYTHON, "-m", "octlm", "inspect", str(run_dir), "--no-probe", "--out", str(tmp_path / "r")]
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=follower, env=quiet_env())
    os.close(follower)
    drawn = b""
    try:
        while chunk := os.read(leader, 65536):
            drawn += chunk
    except OSError:  # EIO: the terminal's last writer has gone (a pseudo-terminal's end of file)
        pass
    finally:
        os.close(leader)
    assert child.wait(timeout=300) == 0
    frames = drawn.decode().split("\r")
    steps = [f.split(" (")[0] for f in frames if f.startswith("inspect: ") and " done, " in f]
    assert list(dict.fromkeys(steps)) == [
        "inspect: ",
        "inspect: loading the run",
        "inspect: counting the training tokens",
        "inspect: comparing the tables with an untrained model",
        "inspect: attention by distance",
        "inspect: drawing the figures, writing the report",
    ]
    assert "(4/5 done, " in drawn.decode() and frames[-1].strip() == ""
