"""Generation (octlm/generation/generate.py): the KV cache matches full passes, sampled generation is seeded, the
window slides, streaming text never splits a character, and the CLI end to end. Sampling itself is
tests/generation/test_sampling.py."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from octlm.cli import main
from octlm.config import config_from_dict
from octlm.data.sources import Document
from octlm.data.tokenizer import Tokenizer, train_tokenizer
from octlm.errors import UserError
from octlm.generation.generate import (
    SAMPLE_TEMPERATURE,
    SAMPLE_TOP_K,
    StreamDecoder,
    encode_prompt,
    generate,
    sample_prompt,
    sample_text,
)
from octlm.model.decoder import Decoder
from octlm.positions import scheme_names

CONTEXT = 12


class FakeTokenizer:
    """Just what `generate` reads: the vocabulary size and the EOT id."""

    vocab_size = 64
    eot_id = 0


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    docs = [Document(f"d{i}", f"déf f{i}(x):\n    return 'naïve € 😀' * {i}\n" * 5) for i in range(6)]
    return train_tokenizer(docs, 300)


def model_for(position: str, vocab: int = 64, seed: int = 0) -> Decoder:
    """A random model with large weights (clear-cut greedy choices), in float64 (no near ties)."""
    cfg = config_from_dict(
        {
            "model": {
                "vocab_size": vocab,
                "d_model": 32,
                "n_layers": 2,
                "n_heads": 4,
                "d_ff": 64,
                "context_length": CONTEXT,
                "position": position,
            }
        }
    )
    torch.manual_seed(seed)
    model = Decoder(cfg.model)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.double().eval()


@pytest.mark.parametrize("position", scheme_names())
def test_cached_and_uncached_greedy_agree(position: str) -> None:
    """Token for token, well past the trained context (learned positions slide their window instead)."""
    model = model_for(position)
    prompt = [0, 5, 9, 17]
    n = 3 * CONTEXT
    notes: list[str] = []
    cached = list(generate(model, FakeTokenizer(), prompt, n, stop_at_eot=False, notice=notes.append))
    uncached = list(
        generate(model, FakeTokenizer(), prompt, n, use_cache=False, stop_at_eot=False, notice=None)
    )
    assert len(cached) == n and cached == uncached
    assert len(notes) == (1 if position == "learned" else 0)
    # Greedy streams of a random model often repeat one token; sampling (same seed) walks many paths.
    sampled = [
        list(
            generate(
                model,
                FakeTokenizer(),
                prompt,
                n,
                temperature=1.0,
                seed=7,
                use_cache=use,
                stop_at_eot=False,
                notice=None,
            )
        )
        for use in (True, False)
    ]
    assert sampled[0] == sampled[1] and len(set(sampled[0])) > 5


@pytest.mark.parametrize("position", ["rope", "learned"])
def test_cache_matches_a_full_pass_in_float32(position: str) -> None:
    model = model_for(position).float()
    prompt = [3, 1, 4, 1, 5]
    cached = list(generate(model, FakeTokenizer(), prompt, CONTEXT - len(prompt), stop_at_eot=False))
    ids = torch.tensor([prompt + cached])
    with torch.inference_mode():
        full = model(ids)[0][0, len(prompt) - 1 : -1].argmax(-1).tolist()
    assert cached == full


def test_sampling_is_seeded_and_options_narrow_it() -> None:
    model = model_for("rope")
    prompt = [1, 2, 3]

    def run(**kw: Any) -> list[int]:
        return list(generate(model, FakeTokenizer(), prompt, 20, stop_at_eot=False, **kw))

    assert run(temperature=1.0, seed=1) == run(temperature=1.0, seed=1)
    assert run(temperature=1.0, seed=1) != run(temperature=1.0, seed=2)
    greedy = run(temperature=0.0)
    assert run(temperature=1.5, top_k=1, seed=3) == greedy
    assert run(temperature=1.5, top_p=1e-6, seed=3) == greedy


def test_sliding_window_reads_exactly_the_last_context_length_ids() -> None:
    """Past the learned table, every new token is predicted from the last `context_length` ids, no fewer."""
    model = model_for("learned")
    windows: list[list[int]] = []
    model.register_forward_pre_hook(lambda _module, args: windows.append(args[0][0].tolist()))
    prompt = list(range(1, CONTEXT + 4))  # longer than the table: the first window is already cut
    out = list(
        generate(model, FakeTokenizer(), prompt, 6, temperature=1.0, seed=2, stop_at_eot=False, notice=None)
    )
    ids = prompt + out
    assert len(windows) == 6
    for n, window in enumerate(windows):
        assert window == ids[: len(prompt) + n][-CONTEXT:]
    # A prompt that fits, continued past the table: cached steps first, then full windows of CONTEXT ids.
    windows.clear()
    prompt = [5, 9, 17]
    out = list(
        generate(
            model,
            FakeTokenizer(),
            prompt,
            CONTEXT + 3,
            temperature=1.0,
            seed=3,
            stop_at_eot=False,
            notice=None,
        )
    )
    ids = prompt + out
    assert windows[0] == prompt and all(len(w) == 1 for w in windows[1 : CONTEXT - 2])
    sliding = windows[CONTEXT - 2 :]
    assert len(sliding) == 5
    for n, window in enumerate(sliding):
        assert window == ids[: CONTEXT + 1 + n][-CONTEXT:]


def test_streamed_and_batched_text_leave_notices_to_the_caller(tokenizer: Tokenizer) -> None:
    """`stream_text` and `print_samples` hand the sliding-window notice to `notice` (octlm generate prints it
    after the text, so a pipe or a terminal never sees it split the text); `out` gets the text alone."""
    import io

    from octlm.generation.generate import print_samples, stream_text
    from octlm.generation.sampling import Sampling

    model, said = model_for("learned", vocab=300), []
    sliding = (
        f"passed the learned position table's {CONTEXT} rows: sliding the window, each new token now "
        f"re-reads the last {CONTEXT} tokens without the cache"
    )
    spelled = (  # é has no merge in this 300-entry vocabulary: its two bytes are two tokens
        "note: the tokenizer has no token for é in the prompt (rare or absent in its training text): the model "
        "reads them byte by byte and may answer with stray bytes, shown as \ufffd"
    )
    ids = list(
        generate(model, tokenizer, encode_prompt(tokenizer, "déf"), 20, stop_at_eot=False, notice=None)
    )
    out = io.StringIO()
    assert (
        stream_text(model, tokenizer, "déf", 20, Sampling(), out, stop_at_eot=False, notice=said.append) == 20
    )
    assert out.getvalue() == "déf" + tokenizer.decode(ids) + "\n" and said == [spelled, sliding]
    out, said = io.StringIO(), []
    count = print_samples(
        model, tokenizer, "déf", 2, 20, Sampling(), out, stop_at_eot=False, notice=said.append
    )
    text = "déf" + tokenizer.decode(ids)
    assert count == 40 and out.getvalue() == f"--- sample 1 ---\n{text}\n--- sample 2 ---\n{text}\n"
    assert said == [spelled, sliding]


def test_eot_stops_and_ids_past_the_tokenizer_are_never_chosen() -> None:
    class Small(FakeTokenizer):
        vocab_size = 10

    model = model_for("nope")
    out = list(generate(model, Small(), [4, 5], 50, temperature=2.0, seed=0, stop_at_eot=False))
    assert max(out) < 10

    greedy = list(generate(model, FakeTokenizer(), [4, 5], 5, stop_at_eot=False))

    class EndsAtSecond(FakeTokenizer):
        eot_id = greedy[1]

    stopped = list(generate(model, EndsAtSecond(), [4, 5], 5))
    assert stopped == greedy[: greedy.index(greedy[1]) + 1]  # EOT is yielded, then nothing


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -0.5}, "temperature"),
        ({"top_k": 0}, "top-k"),
        ({"top_p": 0.0}, "top-p"),
        ({"top_p": 1.5}, "top-p"),
        ({"max_new_tokens": -1}, "max-new-tokens"),
    ],
)
def test_bad_options_are_user_errors(kwargs: dict[str, Any], message: str) -> None:
    args = {"max_new_tokens": 5, **kwargs}
    with pytest.raises(UserError, match=message):
        generate(model_for("nope"), FakeTokenizer(), [1], **args)


def test_empty_prompt_ids_are_user_errors(tokenizer: Tokenizer) -> None:
    """An empty prompt text is EOT alone (tests/generation/test_generate_text.py); no ids at all is refused."""
    with pytest.raises(UserError, match="prompt is empty"):
        generate(model_for("nope"), FakeTokenizer(), [], 5)
    with pytest.raises(UserError, match="outside the model's vocabulary"):
        generate(model_for("nope"), FakeTokenizer(), [64], 5)
    assert encode_prompt(tokenizer, "def")[0] == tokenizer.eot_id


def test_stream_decoder_never_splits_a_character(tokenizer: Tokenizer) -> None:
    text = "naïve € 😀 déf ∑ ok"
    ids = tokenizer.encode(text)
    stream = StreamDecoder(tokenizer)
    pieces = [stream.push(i) for i in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + stream.flush() == text
    # Byte-level tokens of one emoji arrive one by one and print as a whole character.
    emoji = [i for i in tokenizer.encode("😀")]
    if len(emoji) > 1:
        stream = StreamDecoder(tokenizer)
        assert [stream.push(i) for i in emoji][:-1] == [""] * (len(emoji) - 1)


def test_random_token_streams_round_trip(tokenizer: Tokenizer) -> None:
    rng = random.Random(0)
    for _ in range(20):
        ids = [rng.randrange(1, tokenizer.vocab_size) for _ in range(30)]
        stream = StreamDecoder(tokenizer)
        assert "".join(stream.push(i) for i in ids) + stream.flush() == tokenizer.decode(ids)


def test_stream_pieces_join_to_the_full_decode(tokenizer: Tokenizer) -> None:
    """Byte-level decode is the tokens' bytes joined, then UTF-8 with U+FFFD for broken bytes; the stream
    gives the same text piece by piece, and never a U+FFFD that the full decode does not have there."""
    rng = random.Random(1)
    table = {i: tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)}  # ~0.3 ms a call: once
    fragments = []  # ids whose bytes are not whole UTF-8 on their own: pieces of multi-byte characters
    for i, data in table.items():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            fragments.append(i)
    assert len(fragments) > 10  # the emoji, € and ï give byte-level tokens that split characters
    # The same tokenizer, but its bytes looked up in the table.
    fast = SimpleNamespace(token_bytes=table.__getitem__, decode=tokenizer.decode)
    broken = 0
    for trial in range(200):
        n = rng.randrange(1, 40)
        # Mostly fragments (which can also join into whole characters), some of anything, EOT included.
        ids = [
            rng.choice(fragments) if rng.random() < 0.7 else rng.randrange(tokenizer.vocab_size)
            for _ in range(n)
        ]
        if trial % 3 == 0:
            ids += tokenizer.encode("€😀ï 中文")
        full = tokenizer.decode(ids)
        assert full == b"".join(table[i] for i in ids).decode("utf-8", errors="replace")
        broken += "\ufffd" in full
        stream = StreamDecoder(fast)
        so_far = ""
        for i in ids:
            so_far += stream.push(i)
            assert full.startswith(so_far)  # so any U+FFFD printed is one the full decode has there
        assert so_far + stream.flush() == full
    assert broken > 60  # the sequences did cut characters


class CountingTokenizer:
    """A tokenizer that counts the work asked of it: ids decoded and token bytes looked up."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.ids_decoded = 0
        self.bytes_looked_up = 0

    def decode(self, ids: list[int]) -> str:
        self.ids_decoded += len(ids)
        return self.inner.decode(ids)

    def token_bytes(self, token_id: int) -> bytes:
        self.bytes_looked_up += 1
        return self.inner.token_bytes(token_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_stream_decoder_work_is_linear_in_the_output(tokenizer: Tokenizer) -> None:
    """Each push looks at its own token only: no re-decoding of the text so far (which is quadratic)."""
    ids = tokenizer.encode("naïve € 😀 déf ∑ ok " * 100)
    counting = CountingTokenizer(tokenizer)
    stream = StreamDecoder(counting)
    text = "".join(stream.push(i) for i in ids) + stream.flush()
    assert text == tokenizer.decode(ids)
    assert counting.ids_decoded == 0
    assert counting.bytes_looked_up <= len(ids)


def test_sample_text_is_a_seeded_low_temperature_continuation(tokenizer: Tokenizer) -> None:
    assert sample_prompt(config_from_dict({})) == "class"  # the stdlib corpus is code
    assert sample_prompt(config_from_dict({"data": {"source": "text", "text": ["x"]}})) == "The"
    model = model_for("rope", vocab=tokenizer.vocab_size)
    text = sample_text(model, tokenizer, "def", 8, seed=3)
    assert text == sample_text(model, tokenizer, "def", 8, seed=3)
    ids = list(
        generate(
            model,
            tokenizer,
            encode_prompt(tokenizer, "def"),
            8,
            temperature=SAMPLE_TEMPERATURE,
            top_k=SAMPLE_TOP_K,
            seed=3,
            notice=None,
        )
    )
    if ids[-1] == tokenizer.eot_id:
        ids = ids[:-1]
    assert text == "def" + tokenizer.decode(ids)
    assert (SAMPLE_TEMPERATURE, SAMPLE_TOP_K) == (0.7, 40)


def test_train_then_generate_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`octlm train` then `octlm generate` through the CLI on a tiny corpus."""
    corpus = tmp_path / "text"
    corpus.mkdir()
    for i in range(5):
        (corpus / f"f{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 40, encoding="utf-8")
    flags = [
        "--text",
        str(corpus),
        "--data-dir",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "runs" / "day1-rope"),
        "--vocab-size",
        "300",
        "--d-model",
        "32",
        "--n-layers",
        "1",
        "--n-heads",
        "2",
        "--d-ff",
        "64",
        "--context-length",
        "16",
        "--steps",
        "30",
        "--batch-size",
        "4",
        "--eval-interval",
        "15",
        "--checkpoint-interval",
        "15",
        "--warmup-steps",
        "3",
        "--report",
        "false",
        "--position",
        "rope",
        "--sample-tokens",
        "10",
        "--no-progress",
    ]
    assert main(["train", *flags]) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "runs" / "day1-rope"
    assert "bits per byte" in out and str(run_dir) in out and "sample" in out
    args = [
        "generate",
        str(run_dir),
        "--prompt",
        "def ",
        "--max-new-tokens",
        "40",
        "--temperature",
        "0",
    ]
    assert main(args) == 0
    first = capsys.readouterr()
    assert first.out.startswith("def ") and "tokens/s" in first.err
    assert main([*args, "--no-cache"]) == 0
    assert capsys.readouterr().out == first.out  # greedy: the cache changes nothing
    assert main([*args, "--top-p", "2"]) == 2
    assert "top-p" in capsys.readouterr().err
    assert main(["generate", str(tmp_path), "--prompt", "x"]) == 2
    assert "not an octlm run" in capsys.readouterr().err
