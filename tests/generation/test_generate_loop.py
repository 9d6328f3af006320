"""`generate` and its loop (octlm/generation/generate.py), with expected values worked out by hand: its defaults,
the KV cache it starts with and how it grows, the learned table's window, the steps with and without a cache and
through the lean decode step, the prompt checks, the model's mode, and the cut of ids past the tokenizer."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from tiny import tiny_rope_decoder

from octlm.config import config_from_dict
from octlm.data.sources import Document
from octlm.data.tokenizer import train_tokenizer
from octlm.errors import UserError
from octlm.generation.generate import INITIAL_NEW_TOKENS, _usable, generate, generate_batch
from octlm.generation.sampling import Sampling
from octlm.model.decode_step import DecodeStep
from octlm.model.decoder import Decoder, KVCache

CONTEXT = 12
INF = float("inf")


class Tok:
    """What `generate` reads of a tokenizer: the vocabulary size and the EOT id."""

    vocab_size = 64
    eot_id = 0


def model_for(position: str, vocab: int = 64, dropout: float = 0.0) -> Decoder:
    """A random float64 model with large weights: clear-cut greedy choices, no near ties."""
    cfg = config_from_dict(
        {
            "model": {
                "vocab_size": vocab,
                "d_model": 16,
                "n_layers": 1,
                "n_heads": 2,
                "d_ff": 32,
                "context_length": CONTEXT,
                "position": position,
                "dropout": dropout,
            }
        }
    )
    torch.manual_seed(0)
    model = Decoder(cfg.model)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.double().eval()


# ------------------------------------------------------------------------------------------------------------
# generate and its loop


class Recorder:
    """Records every forward call of a model: the ids it reads and the cache's state then."""

    def __init__(self, model: Decoder) -> None:
        self.calls: list[tuple[list[int], int | None, int | None]] = []  # (ids, cache capacity, cache length)
        model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, _module: Any, args: tuple, kwargs: dict) -> None:
        cache = kwargs.get("cache")
        shape = None if cache is None else cache.k.shape[3]
        self.calls.append((args[0][0].tolist(), shape, None if cache is None else cache.length))


def greedy_by_full_passes(model: Decoder, prompt: list[int], n: int) -> list[int]:
    """The reference: n greedy steps, each the argmax of a full forward pass over every id so far."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0][0, -1].argmax()))
    return ids[len(prompt) :]


def test_generate_defaults_greedy_cached_stops_at_eot_and_tells_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = model_for("rope")
    prompt = [3, 1, 4]
    want = greedy_by_full_passes(model, prompt, 6)
    rec = Recorder(model)
    assert list(generate(model, Tok(), prompt, 6)) == want
    # the cache: the prompt once, then one token per step; room for the prompt and the new tokens
    assert rec.calls[0] == (prompt, 3 + 6, 0)
    assert [c[0] for c in rec.calls[1:]] == [[t] for t in want[:5]]
    assert [c[2] for c in rec.calls] == [0, 3, 4, 5, 6, 7]

    class EndsAtThird(Tok):
        eot_id = want[2]

    stopped = list(generate(model, EndsAtThird(), prompt, 6))
    assert stopped == want[: want.index(want[2]) + 1]
    learned = model_for("learned")
    list(generate(learned, Tok(), list(range(1, CONTEXT + 3)), 1))
    assert capsys.readouterr().err == (
        "the prompt has 14 tokens; the learned position table has 12 rows, so only the last 12 are read\n"
    )


def test_generate_sampling_defaults_to_seed_0() -> None:
    model = model_for("nope")
    a = list(generate(model, Tok(), [5, 6], 15, temperature=1.0, stop_at_eot=False))
    assert a == list(generate(model, Tok(), [5, 6], 15, temperature=1.0, seed=0, stop_at_eot=False))
    assert a != list(generate(model, Tok(), [5, 6], 15, temperature=1.0, seed=1, stop_at_eot=False))


def test_the_cache_starts_with_room_for_the_prompt_and_at_most_initial_new_tokens() -> None:
    model = model_for("alibi")
    rec = Recorder(model)
    list(generate(model, Tok(), [1, 2], 1, stop_at_eot=False))
    next(generate(model, Tok(), [1, 2], 10**12, stop_at_eot=False))
    assert [c[1] for c in rec.calls] == [3, 2 + INITIAL_NEW_TOKENS]
    learned = model_for("learned")
    rec = Recorder(learned)
    list(generate(learned, Tok(), [1, 2], 4, stop_at_eot=False))
    next(generate(learned, Tok(), [1, 2], 500, stop_at_eot=False))
    assert [c[1] for c in rec.calls] == [6, 6, 6, 6, CONTEXT]  # never past the learned table


@pytest.mark.parametrize("use_cache", [True, False])
def test_learned_table_windows_notice_once_and_fill_exactly(use_cache: bool) -> None:
    model = model_for("learned")
    prompt = list(range(1, CONTEXT + 1))  # exactly the table: no notice, read whole (with the cache if used)
    want = greedy_by_full_windows(model, prompt, 3)
    rec, notes = Recorder(model), []
    out = list(generate(model, Tok(), prompt, 3, use_cache=use_cache, stop_at_eot=False, notice=notes.append))
    assert out == want
    assert rec.calls[0] == (prompt, CONTEXT if use_cache else None, 0 if use_cache else None)
    ids = prompt + out
    assert rec.calls[1:] == [(ids[1 : CONTEXT + 1], None, None), (ids[2 : CONTEXT + 2], None, None)]
    assert notes == [
        "passed the learned position table's 12 rows: sliding the window, each new token now re-reads the "
        "last 12 tokens without the cache"
    ]
    # filling the table exactly with the last token is not passing it: no notice
    notes.clear()
    list(generate(model, Tok(), [1, 2, 3], CONTEXT - 3 + 1, stop_at_eot=False, notice=notes.append))
    assert notes == []


def greedy_by_full_windows(model: Decoder, prompt: list[int], n: int) -> list[int]:
    """Greedy steps reading at most the last CONTEXT ids (what a learned table of CONTEXT rows can read)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids[-CONTEXT:]]))[0][0, -1].argmax()))
    return ids[len(prompt) :]


def test_uncached_steps_reread_the_whole_sequence() -> None:
    model = model_for("t5")
    rec = Recorder(model)
    out = list(generate(model, Tok(), [7, 8], 3, use_cache=False, stop_at_eot=False))
    assert rec.calls == [([7, 8], None, None), ([7, 8, out[0]], None, None), ([7, 8, *out[:2]], None, None)]


def test_generate_refuses_bad_prompts_by_name() -> None:
    model = model_for("nope")
    with pytest.raises(
        UserError, match="^the prompt is empty: generation needs at least one token to continue$"
    ):
        generate(model, Tok(), [], 3)
    with pytest.raises(UserError, match=r"^prompt token id 70 is outside the model's vocabulary \[0, 64\)$"):
        generate(model, Tok(), [3, 70, -1], 3)
    with pytest.raises(UserError, match=r"^prompt token id -1 is outside"):
        generate(model, Tok(), [0, -1], 3)
    with pytest.raises(UserError, match="^max-new-tokens = -2 must not be negative$"):
        generate(model, Tok(), [1], -2)
    assert (
        list(generate(model, Tok(), [0, 63], 0)) == []
    )  # both edge ids are fine; nothing asked, nothing made


def test_generation_runs_in_eval_mode_and_restores_training() -> None:
    model = model_for("rope", dropout=0.5)
    want = greedy_by_full_passes(model, [2, 3], 4)  # eval mode: no dropout
    model.train()
    assert list(generate(model, Tok(), [2, 3], 4, stop_at_eot=False)) == want
    assert model.training
    model.eval()
    list(generate(model, Tok(), [2, 3], 2, stop_at_eot=False))
    assert not model.training


def test_generate_leaves_the_prompt_list_alone() -> None:
    prompt = [1, 2]
    list(generate(model_for("nope"), Tok(), prompt, 3, stop_at_eot=False))
    assert prompt == [1, 2]


def test_generate_batch_of_two_yields_every_step_for_both_rows() -> None:
    """Kills _generate 31 (`len(rows) > 2`: two rows would be taken for one and yield ints) and 32 (`break`
    for `continue`: a batch would stop after its first step)."""
    model = model_for("rope")
    want = greedy_by_full_passes(model, [5, 6], 5)
    assert generate_batch(model, Tok(), [5, 6], 2, 5, Sampling(), stop_at_eot=False) == [want, want]
    assert generate_batch(model, Tok(), [5, 6], 3, 5, Sampling(), stop_at_eot=False) == [want] * 3


def test_cached_steps_after_the_prompt_go_through_the_lean_decode_step() -> None:
    """Kills _token_steps 36/37 (the lean step never used): its logits equal the model's (tests/model/test_decode_step.py),
    so only which path runs tells them apart; the lean one skips ~150 ops of overhead per token."""
    model = model_for("rope")
    want = greedy_by_full_passes(model, [3, 1, 4], 5)
    forwards: list[int] = []
    steps: list[int] = []
    real_forward, real_step = Decoder.forward, DecodeStep.__call__

    def forward(self: Decoder, ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        forwards.append(ids.shape[1])
        return real_forward(self, ids, *args, **kwargs)

    def step(self: DecodeStep, tokens: torch.Tensor, cache: Any) -> torch.Tensor:
        steps.append(tokens.shape[0])
        return real_step(self, tokens, cache)

    with pytest.MonkeyPatch.context() as mp:  # class attributes, not hooks: hooks would turn the step off
        mp.setattr(Decoder, "forward", forward)
        mp.setattr(DecodeStep, "__call__", step)
        assert list(generate(model, Tok(), [3, 1, 4], 5, stop_at_eot=False)) == want
        assert (forwards, steps) == ([3], [1, 1, 1, 1])  # the prompt once; 4 steps (the 5th is not run)
        forwards.clear()
        steps.clear()
        assert generate_batch(model, Tok(), [3, 1, 4], 2, 5, Sampling(), stop_at_eot=False) == [want] * 2
        assert (forwards, steps) == ([3], [2, 2, 2, 2])


def test_usable_with_nothing_to_cut_writes_nothing() -> None:
    """Kills _usable 2 (`usable <= V`: an empty in-place write on every call): float32 logits are not copied, so
    that write lands on the caller's tensor, which fails for one made under inference_mode and read after it."""
    with torch.inference_mode():
        kept = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, 3.0]])
    out = _usable(kept, 3)
    assert out.tolist() == [[0.5, -1.0, 2.0], [1.0, 0.0, 3.0]] and out.dtype == torch.float32
    cut = _usable(torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64), 2)
    assert cut.dtype == torch.float32 and cut.tolist() == [[0.5, -1.0, -INF]]


# ------------------------------------------------------------------------------------------------------------
# The KV cache grows as decoding needs it


def rope_model() -> Decoder:
    return tiny_rope_decoder(260)


def test_huge_max_new_tokens_starts_with_a_modest_cache() -> None:
    model = rope_model()
    tokenizer = train_tokenizer([Document("a", "def class return self value " * 20)], 260)
    made: list[tuple[KVCache, int]] = []
    real_new_cache = model.new_cache

    def new_cache(batch: int, capacity: int | None = None) -> KVCache:
        cache = real_new_cache(batch, capacity)
        made.append((cache, cache.k.shape[3]))
        return cache

    model.new_cache = new_cache  # type: ignore[method-assign]
    prompt = [tokenizer.eot_id, 5, 6]
    tokens = list(itertools.islice(generate(model, tokenizer, prompt, 10**12, stop_at_eot=False), 300))
    assert len(tokens) == 300 and len(made) == 1
    cache, first = made[0]
    assert first == len(prompt) + INITIAL_NEW_TOKENS == 259
    assert cache.k.shape[3] == 2 * first  # 302 positions needed: doubled once, not grown to 10**12
    assert cache.length == len(prompt) + 299
