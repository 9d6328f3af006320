"""`octlm inspect --hf`: the same report for a pretrained Hugging Face GPT-2, Llama or GPT-NeoX model.

Every model here is tiny, made by the test and saved locally (nothing is downloaded). Its weights are
perturbed away from any initialisation, so "pretrained" and the fresh comparison model differ. The numbers are
checked against independent re-derivations: nearest tokens by NumPy cosine on the table read straight from
the safetensors file, RoPE frequencies from the formula, the fresh model from `from_config` under seed 0.
Refusals (pickled weights, other architectures, a missing folder) are one line on stderr, exit status 2,
nothing written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors.numpy import load_file  # noqa: E402

from octlm.cli import main  # noqa: E402
from octlm.data.sources import Document  # noqa: E402
from octlm.data.tokenizer import EOT, train_tokenizer  # noqa: E402
from octlm.inspect import analysis  # noqa: E402
from octlm.inspect import pretrained as hf_inspect  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VOCAB = 300
# family -> (config, the token table's name in the safetensors file)
FAMILIES = {
    "gpt2": (
        lambda: transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=24, bos_token_id=0, eos_token_id=0
        ),
        "transformer.wte.weight",
    ),
    "llama": (
        lambda: transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
            rope_theta=500.0,
            bos_token_id=0,
            eos_token_id=0,
        ),
        "model.embed_tokens.weight",
    ),
    "neox": (
        lambda: transformers.GPTNeoXConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=64,
            rotary_pct=0.25,
            rotary_emb_base=1000,
            bos_token_id=0,
            eos_token_id=0,
        ),
        "gpt_neox.embed_in.weight",
    ),
}


def save_tokenizer(folder: Path) -> None:
    docs = [Document(f"d{i}", f"def f{i}(self, x):\n    return x + {i}\n") for i in range(30)]
    tokenizer = train_tokenizer(docs, VOCAB)
    tokenizer.save(folder / "octlm.json")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "octlm.json"), eos_token=EOT, clean_up_tokenization_spaces=False
    )
    fast.save_pretrained(folder)
    (folder / "octlm.json").unlink()


def save_model(config, folder: Path, safe: bool = True, tokenizer: bool = True) -> Path:
    """A model of `config` with weights moved well away from any init, saved (and a tokenizer) to `folder`."""
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    if safe:
        model.save_pretrained(folder, safe_serialization=True)
    else:  # what save_pretrained(safe_serialization=False) wrote before transformers 5, which writes no pickles
        model.config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    if tokenizer:
        save_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf-models")
    return {name: save_model(make(), root / name) for name, (make, _) in FAMILIES.items()}


@pytest.fixture(scope="module")
def reports(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`octlm inspect --hf DIR --out OUT` for each family, once."""
    root = tmp_path_factory.mktemp("hf-reports")
    out = {}
    for name, folder in folders.items():
        assert main(["inspect", "--hf", str(folder), "--out", str(root / name)]) == 0
        out[name] = root / name
    return out


def numbers(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text(encoding="utf-8"))


def assert_png(path: Path) -> None:
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    pixels = imread(path)
    assert pixels.ndim == 3 and min(pixels.shape[:2]) > 100 and pixels.std() > 0.01, f"{path.name} is blank"


def cosine_top(table: np.ndarray, i: int, k: int) -> list[tuple[int, float]]:
    """NumPy re-derivation: the k rows of `table` most similar to row i by cosine (itself excluded)."""
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    sims = unit @ unit[i]
    sims[i] = -np.inf
    order = np.argsort(-sims, kind="stable")[:k]
    return [(int(j), float(sims[j])) for j in order]


# ------------------------------------------------------------------------------------------------------------
# The report


@pytest.mark.parametrize("family", list(FAMILIES))
def test_report_files_and_nearest_tokens(family: str, folders, reports) -> None:
    folder, out = folders[family], reports[family]
    names = {
        "report.md",
        "report.html",
        "report.json",
        "embeddings.json",
        "positions.png",
        "tokens_pca.png",
        "norms.png",
    } | ({"position_scheme.png"} if family != "gpt2" else set())
    assert names == {p.name for p in out.iterdir()}
    for png in out.glob("*.png"):
        assert_png(png)
    data = numbers(out)
    assert data["source"]["model_type"] == {"neox": "gpt_neox"}.get(family, family)
    assert data["model"]["vocab_size"] == VOCAB and not data["counts_available"] and data["counts"] is None
    assert data["labels"]["0"] == repr(EOT)
    assert "unseen" not in data and any("without the counts" in note for note in data["notes"])

    # Nearest tokens: NumPy cosine on the table as stored in the safetensors file, for token 5.
    table = load_file(folder / "model.safetensors")[FAMILIES[family][1]].astype(np.float64)
    reported = data["trained"]["neighbours"]["5"]
    expected = cosine_top(table, 5, analysis.DEFAULT_TOP)
    assert [j for j, _ in reported] == [j for j, _ in expected]
    assert np.allclose([s for _, s in reported], [s for _, s in expected], atol=1e-5)

    # The untrained comparison: the same config initialised by transformers under seed 0.
    torch.manual_seed(0)
    fresh = transformers.AutoModelForCausalLM.from_config(FAMILIES[family][0]())
    fresh_table = fresh.get_input_embeddings().weight.detach().double().numpy()
    assert [j for j, _ in data["untrained"]["neighbours"]["0"]] == [
        j for j, _ in cosine_top(fresh_table, 0, 5)
    ]
    assert data["trained"]["neighbours"]["0"] != data["untrained"]["neighbours"]["0"]

    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "A pretrained" in markdown and "from_config, seed 0" in markdown and "| ? |" in markdown
    assert "Row norm by token id" in markdown
    assert (out / "report.html").read_text(encoding="utf-8").count("data:image/png;base64,") == len(
        list(out.glob("*.png"))
    )


def test_gpt2_has_its_position_table(folders, reports) -> None:
    data, markdown = numbers(reports["gpt2"]), (reports["gpt2"] / "report.md").read_text(encoding="utf-8")
    pos = data["positions"]
    assert pos["scheme"] == "learned" and pos["has_vectors"] and "rope" not in pos
    assert np.array(pos["trained"]["similarity"]).shape == (24, 24)
    assert list(pos["trained"]["neighbours"]) == ["0", "1", "12", "23"]
    assert "Nearest positions, trained" in markdown and "Mean cosine similarity of positions" in markdown
    wpe = load_file(folders["gpt2"] / "model.safetensors")["transformer.wpe.weight"].astype(np.float64)
    unit = wpe / np.linalg.norm(wpe, axis=1, keepdims=True)
    assert np.allclose(pos["trained"]["similarity"], unit @ unit.T, atol=1e-5)
    web = json.loads((reports["gpt2"] / "embeddings.json").read_text(encoding="utf-8"))
    assert web["position"] == "learned" and np.array(web["position_similarity"]).shape == (24, 24)
    assert len(web["tokens"]) == VOCAB and web["tokens"][0] == {"id": 0, "text": EOT, "count": 0}


@pytest.mark.parametrize(
    ("family", "head_dim", "rotary", "base"), [("llama", 16, 16, 500.0), ("neox", 32, 8, 1000.0)]
)
def test_rope_frequencies(family: str, head_dim: int, rotary: int, base: float, folders, reports) -> None:
    data, markdown = numbers(reports[family]), (reports[family] / "report.md").read_text(encoding="utf-8")
    pos = data["positions"]
    assert pos["scheme"] == "rope" and not pos["has_vectors"] and "trained" not in pos
    assert (
        "Nearest positions" not in markdown and "RoPE (Su et al.)" in markdown
    )  # octlm's own words for RoPE
    assert pos["shows"] == ["frequencies"] and f"Base {base:g}." in pos["summary"]
    expected = 1.0 / base ** (np.arange(0, rotary, 2) / rotary)  # rotary/2 pairs
    assert len(pos["frequencies"]["theta"]) == rotary // 2
    assert np.allclose(pos["frequencies"]["theta"], expected, atol=1e-5)  # report.json keeps 5 decimals
    loaded = hf_inspect.load_pretrained(str(folders[family]))
    rep = analysis.analyze(loaded.trained, loaded.initial, loaded.tokenizer, None, notes=loaded.notes)
    assert np.abs(rep["positions"]["frequencies"]["theta"] - expected).max() < 1e-6
    partial = (
        f"Only {rotary} of each head's {head_dim} channels rotate; the other {head_dim - rotary} carry no"
    )
    assert (partial in pos["summary"]) == (rotary < head_dim)


# ------------------------------------------------------------------------------------------------------------
# The command line: defaults, tokens, and refusals


def test_default_folder_tokens_and_summary(folders, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["inspect", "--hf", str(folders["llama"]), "--tokens", " return", "--ids", "3", "--top", "2"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "pretrained; model" in printed and "' return'" in printed and "RoPE (Su et al.)" in printed
    data = numbers(tmp_path / "reports" / "llama")
    assert len(data["tokens"]) == 2 and data["tokens"][1] == 3
    assert all(len(nb) == 2 for nb in data["trained"]["neighbours"].values())
    assert hf_inspect.default_out("openai-community/gpt2") == Path("reports/openai-community--gpt2")
    assert hf_inspect.default_out("gpt2") == Path("reports/gpt2")


def test_without_a_tokenizer_tokens_are_ids(tmp_path: Path, capsys) -> None:
    folder = save_model(FAMILIES["gpt2"][0](), tmp_path / "bare", tokenizer=False)
    assert main(["inspect", "--hf", str(folder), "--out", str(tmp_path / "out")]) == 0
    data = numbers(tmp_path / "out")
    assert data["labels"]["0"] == "<id 0>" and any("no tokenizer.json" in n for n in data["notes"])
    assert main(["inspect", "--hf", str(folder), "--tokens", "x", "--out", str(tmp_path / "x")]) == 2
    assert "--ids" in capsys.readouterr().err and not (tmp_path / "x").exists()


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: a fresh process, so every line it writes to stderr is seen."""
    return subprocess.run(
        [sys.executable, "-m", "octlm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
    )


def assert_refused(result: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for phrase in phrases:
        assert phrase in lines[0]


def test_pickled_weights_are_refused(tmp_path: Path) -> None:
    folder = save_model(FAMILIES["gpt2"][0](), tmp_path / "pickled", safe=False)
    assert (folder / "pytorch_model.bin").is_file() and not list(folder.glob("*.safetensors"))
    result = run_cli(["inspect", "--hf", str(folder)], tmp_path)
    assert_refused(result, "refused", "pytorch_model.bin", "pickle can run code", "safe_serialization=True")
    assert not (tmp_path / "reports").exists()


def test_other_architectures_and_missing_folders_are_refused(tmp_path: Path) -> None:
    config = transformers.OPTConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
        word_embed_proj_dim=32,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
    )
    folder = save_model(config, tmp_path / "opt")
    assert_refused(run_cli(["inspect", "--hf", str(folder)], tmp_path), "OPTForCausalLM", "GPT-NeoX")
    assert_refused(run_cli(["inspect", "--hf", str(tmp_path / "nothing")], tmp_path), "no such folder")
    # A Hub name with no network (HF_HUB_OFFLINE here, so that no request is tried): one line too.
    assert_refused(
        run_cli(["inspect", "--hf", "octlm-test/absent"], tmp_path),
        "--hf 'octlm-test/absent' is not in the local Hugging Face cache, and offline mode is on",
    )
    assert not (tmp_path / "reports").exists()


def test_exactly_one_of_run_and_hf(tmp_path: Path, capsys) -> None:
    assert main(["inspect"]) == 2
    assert "exactly one of RUN" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path), "--hf", str(tmp_path)]) == 2
    assert "exactly one of RUN" in capsys.readouterr().err


def test_sentencepiece_tokens_read_as_text() -> None:
    """A SentencePiece vocabulary (Llama 2): `▁` is a space, `<0xNN>` one byte, other tokens their text."""
    vocab = ["<s>", "▁the", "<0x0A>", "ing", "<0xC3>"]
    stub = SimpleNamespace(
        backend_tokenizer=SimpleNamespace(to_str=lambda: json.dumps({"decoder": {"type": "Metaspace"}})),
        convert_ids_to_tokens=lambda i: vocab[i] if i < len(vocab) else None,
    )
    tokenizer = hf_inspect.PretrainedTokenizer(stub)
    assert [tokenizer.token_bytes(i) for i in range(5)] == [b"<s>", b" the", b"\n", b"ing", b"\xc3"]
    assert (
        analysis.token_label(SimpleNamespace(vocab_size=5, token_bytes=tokenizer.token_bytes), 4)
        == "b'\\xc3'"
    )
