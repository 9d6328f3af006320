"""Text in, text out (octlm/generation/generate.py): an empty prompt starts from the end-of-text token, a
character spelled over several byte tokens prints once whole (streamed and final text alike, a broken one as one
U+FFFD), and a prompt's characters the tokenizer cannot represent, or has no token for, are named in a notice."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from tiny import memorise, run_cli, tiny_raw, tiny_rope_decoder, write_corpus
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, trainers

from octlm.config import config_from_dict
from octlm.data.sources import Document
from octlm.data.tokenizer import EOT, Tokenizer, train_tokenizer
from octlm.generation.generate import encode_prompt, generate, print_samples, prompt_notice, stream_text
from octlm.generation.sampling import Sampling
from octlm.model.decoder import Decoder
from octlm.storage.checkpoint import load_model
from octlm.training.loop import train

NO_TOKEN = (
    "note: the tokenizer has no token for {} in the prompt (rare or absent in its training text): the model "
    "reads them byte by byte and may answer with stray bytes, shown as \ufffd"
)


@pytest.fixture(scope="module")
def ascii_tokenizer() -> Tokenizer:
    """Byte-level BPE trained on ASCII code only: any character past ASCII is spelled byte by byte."""
    return train_tokenizer([Document(f"d{i}", "def ok(x):\n    return x + 1\n" * 3) for i in range(4)], 270)


class Writes(io.StringIO):
    """A text stream that also keeps each write, to see what was printed when."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_an_empty_prompt_is_the_end_of_text_token_alone(ascii_tokenizer: Tokenizer) -> None:
    """Training streams are `doc EOT doc EOT ...`: EOT alone is a document's start."""
    assert encode_prompt(ascii_tokenizer, "") == [ascii_tokenizer.eot_id] == [0]
    assert encode_prompt(ascii_tokenizer, "ok") == [0, *ascii_tokenizer.encode("ok")]


def test_a_character_split_over_tokens_prints_once_whole(ascii_tokenizer: Tokenizer) -> None:
    """A model that learned one document, from an empty prompt: € (3 byte tokens) prints whole, and the
    two bytes of a cut € print as one U+FFFD, in the stream and in the batch's final text alike."""
    tok = ascii_tokenizer
    euro = tok.encode("€")
    assert [tok.token_bytes(i) for i in euro] == [b"\xe2", b"\x82", b"\xac"]
    ids = [*tok.encode("ok "), *euro, *euro[:2], *tok.encode("!")]
    assert [tok.token_bytes(i) for i in ids] == [
        b"ok",
        b" ",
        b"\xe2",
        b"\x82",
        b"\xac",
        b"\xe2",
        b"\x82",
        b"!",
    ]
    model = tiny_rope_decoder(tok.vocab_size)
    memorise(model, torch.tensor([[tok.eot_id, *ids, tok.eot_id]]), steps=100, lr=1e-2)
    out, said = Writes(), []
    assert stream_text(model, tok, "", 20, Sampling(0.0), out, notice=said.append) == len(ids) + 1
    assert out.writes == ["", "ok", " ", "€", "\ufffd!", "\n"] and said == []
    out = Writes()
    assert print_samples(model, tok, "", 2, 20, Sampling(0.0), out, notice=said.append) == 2 * (len(ids) + 1)
    assert out.getvalue() == "--- sample 1 ---\nok €\ufffd!\n--- sample 2 ---\nok €\ufffd!\n" and said == []


def test_a_dangling_byte_at_the_end_prints_as_one_replacement(ascii_tokenizer: Tokenizer) -> None:
    """The stream holds the start of a character until the end, then gives it up as U+FFFD."""
    from octlm.generation.generate import StreamDecoder

    stream = StreamDecoder(ascii_tokenizer)
    first, second = ascii_tokenizer.encode("€")[:2]
    assert [stream.push(first), stream.push(second), stream.flush()] == ["", "", "\ufffd"]


def test_characters_without_a_token_are_named(ascii_tokenizer: Tokenizer) -> None:
    assert prompt_notice(ascii_tokenizer, "def ok(x):") is None
    assert prompt_notice(ascii_tokenizer, "ok 日本日 €\u200b!") == NO_TOKEN.format("日, 本, €, U+200B")
    many = "".join(chr(0x4E00 + i) for i in range(12))
    assert prompt_notice(ascii_tokenizer, many) == NO_TOKEN.format(", ".join(many[:10]) + " and 2 more")
    # the edges: ten characters are all named, the eleventh is "1 more"
    assert prompt_notice(ascii_tokenizer, many[:10]) == NO_TOKEN.format(", ".join(many[:10]))
    assert prompt_notice(ascii_tokenizer, many[:11]) == NO_TOKEN.format(", ".join(many[:10]) + " and 1 more")


def test_characters_the_tokenizer_cannot_represent_are_named() -> None:
    """A tokenizer that is not byte-level (a hand-made tokenizer.json) drops what it never saw."""
    hf = HFTokenizer(models.BPE())
    hf.decoder = decoders.Fuse()  # tokens joined as they are
    trainer = trainers.BpeTrainer(special_tokens=[EOT], show_progress=False)
    hf.train_from_iterator(["def ok(x): return x"] * 3, trainer)
    tok = Tokenizer(hf)
    assert tok.decode(tok.encode("ok 日")) == "ok "
    assert prompt_notice(tok, "ok 日本 é") == (
        "note: the tokenizer cannot represent 日, 本, é in the prompt: the model reads the prompt without them"
    )
    out, said = io.StringIO(), []
    small = {"vocab_size": 64, "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "context_length": 8}
    model = Decoder(config_from_dict({"model": small}).model)
    assert stream_text(model, tok, "ok 日", 0, Sampling(0.0), out, notice=said.append) == 0
    assert out.getvalue() == "ok 日\n"
    assert said == [
        "note: the tokenizer cannot represent 日 in the prompt: the model reads the prompt without them"
    ]


def test_generate_with_an_empty_prompt_from_the_command_line(tmp_path: Path, monkeypatch) -> None:
    """`octlm generate RUN --prompt ""` prints the greedy continuation of EOT alone."""
    monkeypatch.chdir(tmp_path)
    write_corpus(Path("text"))
    train(
        config_from_dict(tiny_raw(Path("."), Path("text"), steps=3, run_name="t"), name="t"), progress=False
    )
    model, _config, tok = load_model(Path("runs/t"))
    ids = list(generate(model, tok, [tok.eot_id], 12, stop_at_eot=False, notice=None))
    code, out, err = run_cli(
        ["generate", "runs/t", "--prompt", "", "--temperature", "0", "--max-new-tokens", "12", "--keep-going"]
    )
    assert (code, out) == (0, tok.decode(ids) + "\n"), err
    assert err.startswith("[12 tokens in ")
