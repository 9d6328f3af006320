"""The lean decoding step (octlm/model/decode_step.py) against the model's own forward, and batched generation."""

from __future__ import annotations

import io

import pytest
import torch

from octlm.config import config_from_dict
from octlm.data.sources import Document
from octlm.data.tokenizer import Tokenizer, train_tokenizer
from octlm.errors import UserError
from octlm.generation.generate import generate, stream_text
from octlm.generation.sampling import Sampling
from octlm.model.decode_step import DecodeStep, Dense
from octlm.model.decoder import Decoder
from octlm.positions import scheme_names

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


def hooked(model: Decoder) -> Decoder:
    """`model` with a forward hook that does nothing: generation then calls `model(...)` for every step."""
    model.register_forward_hook(lambda *_: None)
    assert not DecodeStep.supports(model)
    return model


SHAPES = {  # the model variants a step must follow: GPT-2, Llama (GQA, RMSNorm, SwiGLU, no bias), NoPE layers
    "gpt2": {},
    "llama": {"norm": "rmsnorm", "mlp": "swiglu", "bias": False, "n_kv_heads": 2},
    "nope-layer": {"nope_layers": [1]},
}


def valid(position: str, shape: str) -> bool:
    """Whether the config takes `shape` with `position` (NoPE layers need a scheme acting inside attention)."""
    try:
        model_for(position, **SHAPES[shape])
    except UserError:
        return False
    return True


@pytest.mark.parametrize(
    ("position", "shape"), [(p, s) for p in scheme_names() for s in SHAPES if valid(p, s)]
)
def test_step_logits_equal_the_models_forward(position: str, shape: str) -> None:
    """Batch 3, ten steps after a 5-token prompt, float32: the step's logits and its cache against
    `model(tokens, cache=cache)`. The step's GEMVs sum in another order (`addmm` on `[in, out]` weights);
    measured over every case here: logits within 9.5e-7, keys and values within 7.2e-7."""
    model = model_for(position, **SHAPES[shape])
    if not DecodeStep.supports(model):  # a scheme that reads the content: generation uses model(...)
        assert any(
            model.layer_scheme(i).is_contextual or model.layer_scheme(i).replaces_attention for i in range(2)
        )
        return
    step = DecodeStep(model)
    prompt = torch.randint(0, 64, (3, 5), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ours, theirs = model.new_cache(3, 6), model.new_cache(3, 6)  # capacity 6: both must grow
        model(prompt, cache=ours)
        tokens = model(prompt, cache=theirs)[0][:, -1].argmax(-1)
        for _ in range(10):
            want = model(tokens[:, None], cache=theirs)[0][:, -1]
            got = step(tokens, ours)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
            tokens = want.argmax(-1)
    assert ours.length == theirs.length == 15
    torch.testing.assert_close(ours.k[..., :15, :], theirs.k[..., :15, :], rtol=0, atol=1e-6)
    torch.testing.assert_close(ours.v[..., :15, :], theirs.v[..., :15, :], rtol=0, atol=1e-6)


def next_logits(model: Decoder, step: DecodeStep | None) -> torch.Tensor:
    """Logits after [1, 2] then 3: through `step` when given, else through `model(...)`."""
    with torch.inference_mode():
        cache = model.new_cache(1, 8)
        model(torch.tensor([[1, 2]]), cache=cache)
        if step is None:
            return model(torch.tensor([[3]]), cache=cache)[0][:, -1]
        return step(torch.tensor([3]), cache)


def test_the_step_follows_weights_changed_after_it_was_built() -> None:
    """It copies the weights (transposed) but follows in-place changes: a model trained, edited or loaded
    between two samples is read as it is now."""
    model = model_for("rope")
    step = DecodeStep(model)
    with torch.no_grad():
        model.blocks[0].mlp.fc.weight.mul_(2.0)
        model.head.weight.add_(0.1)  # the tied token table
    torch.testing.assert_close(next_logits(model, step), next_logits(model, None), rtol=0, atol=1e-5)
    # a real optimizer step (AdamW writes the parameters in place), then load_state_dict
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]]), targets=torch.tensor([[2, 3, 4]]))[1].backward()
    optimizer.step()
    torch.testing.assert_close(next_logits(model, step), next_logits(model, None), rtol=0, atol=1e-5)
    model.load_state_dict(model_for("rope").state_dict())
    torch.testing.assert_close(next_logits(model, step), next_logits(model, None), rtol=0, atol=1e-5)


def test_a_model_built_under_inference_mode_decodes_the_same() -> None:
    """Its parameters have no version counter: the step takes them as they are, and still agrees."""
    with torch.inference_mode():
        model = model_for("learned", n_kv_heads=2)
    step = DecodeStep(model)
    assert step.watched == []
    torch.testing.assert_close(next_logits(model, step), next_logits(model, None), rtol=0, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_dense_is_the_linear_layer_on_a_transposed_copy(bias: bool) -> None:
    """`Dense(linear)(x)` is `linear(x)` for `[B, in]` rows, from its own `[in, out]` copy of the weight."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 24, bias=bias)
    dense = Dense(linear)
    x = torch.randn(3, 48)
    assert dense.weight.shape == (48, 24) and dense.weight.is_contiguous()
    assert dense.weight.data_ptr() != linear.weight.data_ptr()
    with torch.no_grad():
        torch.testing.assert_close(dense(x), linear(x), rtol=0, atol=1e-6)  # measured 3.6e-7
        linear.weight.zero_()
    assert dense(x).abs().max() > 0.1  # a copy: changing the layer does not change it until `take()`
    dense.take()
    with torch.no_grad():
        torch.testing.assert_close(dense(x), linear(x), rtol=0, atol=0)  # only the bias is left


def test_hooks_send_generation_through_the_models_forward() -> None:
    model = model_for("nope")
    assert DecodeStep.supports(model)
    calls: list[int] = []
    model.register_forward_pre_hook(lambda _m, args: calls.append(args[0].shape[1]))
    assert not DecodeStep.supports(model)
    list(generate(model, Tok(), [1, 2, 3], 5, stop_at_eot=False))
    assert calls == [3, 1, 1, 1, 1]  # the prompt, then every step but the last one's (which is not run)


@pytest.mark.parametrize("position", ["learned", "rope", "alibi"])
def test_lean_and_reference_decoding_stream_the_same_text(position: str, tokenizer: Tokenizer) -> None:
    """`octlm generate`'s output, seeded sampling and greedy, with the lean step and through `model(...)`;
    learned runs past its table (the window slides)."""
    texts = []
    for model in (model_for(position, vocab=300), hooked(model_for(position, vocab=300))):
        out = io.StringIO()
        for sampling in (Sampling(0.9, None, 0.95, seed=4), Sampling()):
            count = stream_text(model, tokenizer, "déf", 2 * CONTEXT, sampling, out, stop_at_eot=False)
            assert count == 2 * CONTEXT
        texts.append(out.getvalue())
    assert texts[0] == texts[1] and texts[0].startswith("déf") and len(set(texts[0])) > 5
