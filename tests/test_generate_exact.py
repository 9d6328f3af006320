"""Exact expected values for the sampling part of octlm/generation/generate.py, written to kill its mutants
(scripts/mutation, docs/MUTANTS.md).

Expected probabilities are written out by hand (exp and a sum); expected tokens are the argmax of a full
forward pass or a draw from a reference generator, never a second run of the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from octlm.config import config_from_dict
from octlm.errors import UserError
from octlm.generation.generate import INITIAL_NEW_TOKENS, _usable, generate, generate_batch
from octlm.generation.sampling import Sampling, check_sampling, choose_tokens
from octlm.model.decode_step import DecodeStep
from octlm.model.decoder import Decoder


def pick_token(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float,
               generator: torch.Generator | None) -> int:  # fmt: skip
    """One token id from `logits` `[V]`: `choose_tokens` on one row, read as an int."""
    return int(choose_tokens(logits, temperature, top_k, top_p, generator))


CONTEXT = 12
INF = float("inf")


class Tok:
    """What `generate` reads of a tokenizer: the vocabulary size and the EOT id."""

    vocab_size = 64
    eot_id = 0


def model_for(position: str, vocab: int = 64, dropout: float = 0.0) -> Decoder:
    """A random float64 model with large weights: clear-cut greedy choices, no near ties."""
    cfg = config_from_dict({"model": {"vocab_size": vocab, "d_model": 16, "n_layers": 1, "n_heads": 2,
                                      "d_ff": 32, "context_length": CONTEXT, "position": position,
                                      "dropout": dropout}})  # fmt: skip
    torch.manual_seed(0)
    model = Decoder(cfg.model)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.double().eval()


def multinomial_input(sample: Callable[[], object]) -> torch.Tensor:
    """The probabilities `sample()` hands to its one `torch.multinomial` call (a spy records them)."""
    seen: list[torch.Tensor] = []
    real = torch.multinomial

    def spy(probs: torch.Tensor, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        seen.append(probs.clone())
        return real(probs, n, generator=generator)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "multinomial", spy)
        sample()
    assert len(seen) == 1
    return seen[0]


def drawn_from(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float) -> torch.Tensor:
    """The distribution `pick_token` hands to `torch.multinomial`."""
    g = torch.Generator().manual_seed(0)
    return multinomial_input(lambda: pick_token(logits, temperature, top_k, top_p, g))


def softmax_by_hand(values: list[float]) -> torch.Tensor:
    weights = [0.0 if v == -INF else math.exp(v) for v in values]
    return torch.tensor([w / sum(weights) for w in weights], dtype=torch.float64)


# -- Sampling and the option checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.5}, r"^temperature = -0.5 must be 0 \(greedy\) or a finite positive number$"),
        ({"temperature": INF}, r"^temperature = inf must be 0 \(greedy\) or a finite positive number$"),
        ({"top_k": 0}, r"^top-k = 0 must be at least 1 \(or left unset for no limit\)$"),
        ({"top_p": 0.0}, r"^top-p = 0.0 must be in \(0, 1\]; 1 keeps every token$"),
        ({"top_p": 1.0000001}, r"^top-p = 1.0000001 must be in \(0, 1\]; 1 keeps every token$"),
    ],
)
def test_sampling_refuses_out_of_range_settings_by_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        Sampling(**kwargs)


def test_sampling_accepts_the_edges_and_has_greedy_defaults() -> None:
    edges = Sampling(temperature=0.0, top_k=1, top_p=1.0, seed=5)
    assert (edges.temperature, edges.top_k, edges.top_p, edges.seed) == (0.0, 1, 1.0, 5)
    default = Sampling()
    assert (default.temperature, default.top_k, default.top_p, default.seed) == (0.0, None, 1.0, 0)
    Sampling(temperature=1e-300, top_p=1e-300)


def test_check_sampling_checks_each_setting() -> None:
    check_sampling(0.0, 1, 1.0, 0)  # every edge in range
    with pytest.raises(UserError, match="^temperature = -1 "):
        check_sampling(-1, None, 1.0, 0)
    with pytest.raises(UserError, match="^top-k = 0 "):
        check_sampling(0.5, 0, 1.0, 0)
    with pytest.raises(UserError, match="^top-p = 2.0 "):
        check_sampling(0.5, None, 2.0, 0)
    with pytest.raises(UserError, match="^max-new-tokens = -1 must not be negative$"):
        check_sampling(0.5, None, 1.0, -1)


# -- pick_token ---------------------------------------------------------------------------------------------


def test_greedy_is_the_argmax() -> None:
    assert pick_token(torch.tensor([1.0, 3.0, -2.0, 2.5]), 0.0, None, 1.0, None) == 1
    assert pick_token(torch.tensor([-5.0, -7.0, -6.0]), 0.0, None, 1.0, None) == 0


def test_temperature_one_is_plain_softmax() -> None:
    logits = [0.5, -1.0, 2.0]
    torch.testing.assert_close(drawn_from(torch.tensor(logits), 1.0, None, 1.0), softmax_by_hand(logits),
                               rtol=0, atol=1e-15)  # fmt: skip


def test_the_smallest_normal_temperature_does_not_overflow() -> None:
    """At T = 1e-308 the largest logit must be moved to 0 before dividing: 6 / 1e-308 overflows to inf."""
    logits = torch.tensor([3.0, 2.95, 1.0], dtype=torch.float64)
    assert [pick_token(logits, 1e-308, None, 1.0, torch.Generator().manual_seed(s)) for s in range(5)] == [
        0
    ] * 5


def test_top_k_keeps_exactly_the_k_largest() -> None:
    logits = [0.0, 3.0, 1.0, 2.0, -1.0]
    got = drawn_from(torch.tensor(logits), 1.0, 3, 1.0)
    torch.testing.assert_close(got, softmax_by_hand([-INF, 3.0, 1.0, 2.0, -INF]), rtol=0, atol=1e-15)
    got = drawn_from(torch.tensor(logits), 1.0, 1, 1.0)
    assert got.tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    # top_k past the vocabulary keeps everything
    torch.testing.assert_close(drawn_from(torch.tensor(logits), 1.0, 9, 1.0), softmax_by_hand(logits),
                               rtol=0, atol=1e-15)  # fmt: skip


def test_top_p_drops_a_token_once_the_ones_before_reach_p() -> None:
    """Probabilities 1/4, 1/2, 1/8, 1/8 (exact in binary): at p = 1/2 the largest alone reaches p, so only it
    stays; at p = 3/4 the first two reach it exactly, so the last two go."""
    logits = torch.tensor([math.log(2), math.log(4), 0.0, 0.0], dtype=torch.float64)
    assert drawn_from(logits, 1.0, None, 0.5).tolist() == [0.0, 1.0, 0.0, 0.0]
    two = torch.tensor([1 / 3, 2 / 3, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(drawn_from(logits, 1.0, None, 0.5000001), two, rtol=0, atol=1e-15)
    torch.testing.assert_close(drawn_from(logits, 1.0, None, 0.75), two, rtol=0, atol=1e-15)
    three = drawn_from(logits, 1.0, None, 0.7500001)
    assert (three > 0).sum() == 3 and three[:2].sum().item() == pytest.approx(6 / 7, abs=1e-15)
    # p = 1 keeps even a token of probability e^-50 (a cut at p < 1 would round it away)
    tiny = drawn_from(torch.tensor([0.0, -50.0], dtype=torch.float64), 1.0, None, 1.0)
    assert tiny[1].item() == pytest.approx(math.exp(-50) / (1 + math.exp(-50)), rel=1e-12, abs=0)


def test_a_tiny_top_p_on_float32_logits_keeps_the_argmax() -> None:
    """top_p = 1e-50 is 0 in float32: the cut is made in float64, where it is not."""
    logits = torch.tensor([0.1, 0.3, 0.2])  # float32
    assert [pick_token(logits, 1.0, None, 1e-50, torch.Generator().manual_seed(s)) for s in range(5)] == [
        1
    ] * 5


def test_the_draw_uses_the_given_generator() -> None:
    logits = [0.0, 0.1, -0.2, 0.3, 0.05, -0.1, 0.2, 0.0]
    probs = softmax_by_hand(logits)
    want = [int(torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(s))) for s in range(20)]
    torch.manual_seed(123)  # the global generator must play no part
    got = [
        pick_token(torch.tensor(logits), 1.0, None, 1.0, torch.Generator().manual_seed(s)) for s in range(20)
    ]
    assert got == want and len(set(want)) > 3


# -- generate and its loop -------------------------------------------------------------------------------


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


# -- batches of rows, the lean step, the cut of unusable ids -------------------------------------------------


def drawn_rows(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The distributions `[B, V]` `choose_tokens` hands to `torch.multinomial` for a batch."""
    g = torch.Generator().manual_seed(0)
    return multinomial_input(lambda: choose_tokens(logits, temperature, None, 1.0, g))


def test_each_rows_largest_logit_is_moved_to_0_on_its_own() -> None:
    """Kills choose_tokens 13/15 (the largest logit of the whole batch, not of each row) and 16/19 (no keepdim:
    `[B, V] - [B]`, which fails for B != V or shifts columns): bugs of dropping an argument that only several
    rows show. At T = 1e-306 row 0 moved by row 1's maximum (1000) would be -inf everywhere (softmax NaN)."""
    logits = torch.tensor([[0.0, 1.0, -1.0], [1000.0, 999.0, 0.0]], dtype=torch.float64)
    got = drawn_rows(logits, 1e-306)
    assert got.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    g = torch.Generator().manual_seed(0)
    assert [choose_tokens(logits, 1e-306, None, 1.0, g).tolist() for _ in range(3)] == [[1, 0]] * 3
    # at T = 1 each row is its own softmax (B = 2 rows, V = 3: no broadcast can stand in for keepdim)
    want = torch.stack([softmax_by_hand([0.0, 1.0, -1.0]), softmax_by_hand([0.0, -1.0, -1000.0])])
    torch.testing.assert_close(drawn_rows(logits, 1.0), want, rtol=0, atol=1e-15)


def test_generate_batch_of_two_yields_every_step_for_both_rows() -> None:
    """Kills _generate 31 (`len(rows) > 2`: two rows would be taken for one and yield ints) and 32 (`break`
    for `continue`: a batch would stop after its first step)."""
    model = model_for("rope")
    want = greedy_by_full_passes(model, [5, 6], 5)
    assert generate_batch(model, Tok(), [5, 6], 2, 5, Sampling(), stop_at_eot=False) == [want, want]
    assert generate_batch(model, Tok(), [5, 6], 3, 5, Sampling(), stop_at_eot=False) == [want] * 3


def test_cached_steps_after_the_prompt_go_through_the_lean_decode_step() -> None:
    """Kills _token_steps 36/37 (the lean step never used): its logits equal the model's (tests/test_decode.py),
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
