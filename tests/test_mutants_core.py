"""Tests that kill mutants `mutmut` left alive in the core outside the scheme modules (docs/MUTANTS.md): the
interface's defaults in positions.py and the paths model.py chooses between. The scheme modules' own are in
tests/test_mutants_schemes.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import octlm.model.decoder
from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.generation.generate import generate, generate_batch
from octlm.generation.sampling import Sampling
from octlm.model.decoder import ContextualBias, Decoder
from octlm.positions import PositionScheme
from octlm.positions.formulas import add_positions, alibi_slopes


def test_a_scheme_that_shows_frequencies_without_defining_them_says_so() -> None:
    """The interface's default names the class and the missing method (an empty NotImplementedError would not)."""

    class Bare(PositionScheme):
        name, shows = "bare-test", ("frequencies",)

    with pytest.raises(NotImplementedError) as raised:
        Bare().frequencies()
    assert str(raised.value) == "bare-test lists 'frequencies' in shows but does not define frequencies()"


def test_a_shape_mismatch_names_both_shapes_and_the_one_wanted() -> None:
    """The wanted [T, C] is the token vectors' last two sizes: not from the batch size on, not only C."""
    with pytest.raises(UserError) as raised:
        add_positions(torch.zeros(2, 5, 4), torch.zeros(6, 4))
    assert str(raised.value) == (
        "cannot add position table of shape [6, 4] to token vectors of shape [2, 5, 4]: the position table "
        "must be [T, C] = [5, 4]"
    )


def test_alibi_slopes_are_float32_whatever_the_default_dtype_and_refuse_no_heads() -> None:
    """`[H]` float32 as documented, also where a user has made float64 the default (a bare `torch.tensor` of
    Python floats would follow it); zero heads is one line naming the value."""
    torch.set_default_dtype(torch.float64)
    try:
        slopes = alibi_slopes(8)
    finally:
        torch.set_default_dtype(torch.float32)
    assert slopes.dtype == torch.float32 and slopes.tolist() == [2.0**-i for i in range(1, 9)]
    with pytest.raises(UserError) as raised:
        alibi_slopes(0)
    assert str(raised.value) == "ALiBi needs at least one head, got 0"


@pytest.mark.parametrize(("length", "whole"), [(8, True), (9, False)])
def test_cope_builds_its_bias_whole_up_to_the_pair_limit_and_per_chunk_past_it(
    length: int, whole: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CoPE's bias depends on each layer's queries and keys, so `Attention.forward` decides itself: whole (the
    fast path) while queries × keys ≤ WHOLE_BIAS_PAIRS, per query chunk past it. 8 × 8 = 64 is the limit here;
    at 9 tokens the head size (4) must not stand in for a length (4 × 9 ≤ 64), nor `<` for `<=` at 8."""
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 64)
    seen: list[type] = []
    real = octlm.model.decoder.attention

    def spy(q: Tensor, k: Tensor, v: Tensor, mask, *args, **kwargs) -> Tensor:  # noqa: ANN001
        seen.append(type(mask))
        return real(q, k, v, mask, *args, **kwargs)

    monkeypatch.setattr(octlm.model.decoder, "attention", spy)
    config = ModelConfig(vocab_size=64, d_model=16, context_length=16, n_layers=1, n_heads=4, d_ff=32,
                         position="cope", cope_positions=8)  # fmt: skip
    torch.manual_seed(0)
    model = Decoder(config).eval()
    assert config.head_dim == 4
    with torch.inference_mode():
        model(torch.randint(0, 64, (1, length)))
    assert seen == [Tensor if whole else ContextualBias]


# ---------------------------------------------------------------------------------------------------------------
# generate_batch (octlm/generation/generate.py)


class Tokens:
    """What generation reads of a tokenizer: the vocabulary size and the EOT id."""

    def __init__(self, eot_id: int = 0) -> None:
        self.vocab_size, self.eot_id = 64, eot_id


def sharp(position: str) -> Decoder:
    """A random model with large weights: clear-cut greedy choices."""
    config = ModelConfig(vocab_size=64, d_model=32, context_length=8, n_layers=1, n_heads=4, d_ff=64,
                         position=position)  # fmt: skip
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
