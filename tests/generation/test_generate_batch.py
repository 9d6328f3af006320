"""Batched generation (octlm/generation/generate.py's `generate_batch` and `print_samples`): each row an
independent sample stopping at its own EOT, a batch of one, a batch whose rows all ended, the notices passed on."""

from __future__ import annotations

import io

import pytest
import torch

from octlm.config import ModelConfig, config_from_dict
from octlm.data.sources import Document
from octlm.data.tokenizer import Tokenizer, train_tokenizer
from octlm.errors import UserError
from octlm.generation.generate import generate, generate_batch, print_samples
from octlm.generation.sampling import Sampling
from octlm.model.decoder import Decoder

CONTEXT = 16


class Tok:
    """What `generate` reads of a tokenizer: the vocabulary size and the EOT id."""

    vocab_size = 64
    eot_id = 0


def model_for(position: str, vocab: int = 64, **model: object) -> Decoder:
    """A random float32 model with large weights (clear-cut greedy choices)."""
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
                **model,
            }
        }
    )
    torch.manual_seed(0)
    m = Decoder(cfg.model)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.3)
    return m.eval()


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    docs = [Document(f"d{i}", f"déf f{i}(x):\n    return 'naïve € 😀' * {i}\n" * 5) for i in range(6)]
    return train_tokenizer(docs, 300)


def test_generate_batch_rows_are_independent_samples() -> None:
    model = model_for("rope")
    greedy = list(generate(model, Tok(), [5, 6], 12, stop_at_eot=False))
    assert generate_batch(model, Tok(), [5, 6], 3, 12, Sampling(), stop_at_eot=False) == [greedy] * 3
    sampling = Sampling(temperature=1.0, seed=3)
    rows = generate_batch(model, Tok(), [5, 6], 4, 12, sampling, stop_at_eot=False)
    assert rows == generate_batch(model, Tok(), [5, 6], 4, 12, sampling, stop_at_eot=False)  # seeded
    assert len({tuple(r) for r in rows}) == 4 and all(len(r) == 12 for r in rows)
    with pytest.raises(UserError, match="^num-samples = 0 must be at least 1$"):
        generate_batch(model, Tok(), [5, 6], 0, 12, sampling)


def test_generate_batch_stops_each_row_at_its_eot() -> None:
    model = model_for("alibi")
    rows = generate_batch(model, Tok(), [5, 6], 6, 30, Sampling(temperature=1.0, seed=0), stop_at_eot=False)
    eot = rows[0][2]  # a token row 0 makes third: with it as EOT, row 0 stops there

    class Ends(Tok):
        eot_id = eot

    stopped = generate_batch(model, Ends(), [5, 6], 6, 30, Sampling(temperature=1.0, seed=0))
    for full, cut in zip(rows, stopped, strict=True):
        want = full[: full.index(eot) + 1] if eot in full else full
        assert cut == want
    assert stopped[0] == rows[0][:3]


def test_print_samples_prints_every_sample_whole(tokenizer: Tokenizer) -> None:
    model = model_for("rope", vocab=300)
    out = io.StringIO()
    count = print_samples(model, tokenizer, "déf", 2, 7, Sampling(0.8, seed=1), out, stop_at_eot=False)
    ids = generate_batch(
        model,
        tokenizer,
        [tokenizer.eot_id, *tokenizer.encode("déf")],
        2,
        7,
        Sampling(0.8, seed=1),
        stop_at_eot=False,
    )
    assert count == 14
    assert out.getvalue() == "".join(
        f"--- sample {i + 1} ---\ndéf{tokenizer.decode(r)}\n" for i, r in enumerate(ids)
    )


# ------------------------------------------------------------------------------------------------------------
# A batch of one, a batch whose rows all ended, the notices passed on or dropped


class Tokens:
    """What generation reads of a tokenizer: the vocabulary size and the EOT id."""

    def __init__(self, eot_id: int = 0) -> None:
        self.vocab_size, self.eot_id = 64, eot_id


def sharp(position: str) -> Decoder:
    """A random model with large weights: clear-cut greedy choices."""
    config = ModelConfig(
        vocab_size=64, d_model=32, context_length=8, n_layers=1, n_heads=4, d_ff=64, position=position
    )
    torch.manual_seed(0)
    model = Decoder(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def test_a_batch_of_one_is_the_single_continuation() -> None:
    """One sample is a valid batch (a `< 2` or `<= 1` check would refuse it; before the fix the single-row
    stream yielded bare ints and the batch loop could not read them)."""
    model = sharp("rope")
    greedy = list(generate(model, Tokens(), [5, 6], 6, stop_at_eot=False))
    assert generate_batch(model, Tokens(), [5, 6], 1, 6, Sampling(), stop_at_eot=False) == [greedy]


def test_a_batch_whose_rows_all_ended_returns_them() -> None:
    """Every row's first greedy token is EOT here: the batch ends after one step of twelve, and the lists come
    back (each ending with EOT), not None."""
    model = sharp("rope")
    first = next(iter(generate(model, Tokens(), [5, 6], 1, stop_at_eot=False)))
    assert generate_batch(model, Tokens(eot_id=first), [5, 6], 3, 12, Sampling()) == [[first]] * 3


def test_a_batch_passes_its_notices_on_or_drops_them_when_asked() -> None:
    """A prompt longer than the learned table is announced through `notice`; None silences it."""
    model = sharp("learned")
    heard: list[str] = []
    rows = generate_batch(model, Tokens(), list(range(1, 11)), 2, 1, Sampling(), notice=heard.append)
    assert heard == [
        "the prompt has 10 tokens; the learned position table has 8 rows, so only the last 8 are read"
    ]
    assert generate_batch(model, Tokens(), list(range(1, 11)), 2, 1, Sampling(), notice=None) == rows
