"""What the Hugging Face tests share (tests/interop/test_hf.py, test_hf_arch.py): small models with random
weights moved well away from their init (norm weights not 1, biases not 0, larger matrices), so that a mapping
mistake such as a missing transpose or swapped gate/up shows in the logits; and an exported folder checked
through transformers' Auto classes. Import it after `pytest.importorskip("transformers")`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tokenizers
import torch
import transformers

from octlm.config import Config, ModelConfig
from octlm.data.sources import Document
from octlm.data.tokenizer import Tokenizer, train_tokenizer
from octlm.generation.generate import encode_prompt
from octlm.model.decoder import Decoder
from octlm.storage.checkpoint import save_checkpoint

# Largest |logit difference| measured on this machine (float32, both attention kernels): GPT-2 3.1e-6, the
# small Llamas 3.8e-6 (exported folders included). The tolerance leaves about 3x for another CPU's kernels.
TOL = 1e-5

SMALL_GPT2 = ModelConfig(vocab_size=300, d_model=64, context_length=32, n_layers=2, n_heads=4, d_ff=256)
SMALL_LLAMA = ModelConfig(
    vocab_size=300,
    d_model=64,
    context_length=32,
    n_layers=2,
    n_heads=4,
    d_ff=172,
    position="rope",
    norm="rmsnorm",
    mlp="swiglu",
    bias=False,
    rope_base=500.0,
    norm_eps=1e-6,
)


def random_model(config: ModelConfig, seed: int = 0) -> Decoder:
    """A Decoder in eval mode whose every parameter is moved well away from its initial value."""
    torch.manual_seed(seed)
    model = Decoder(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            # 1-D: norm weights and biases (init 1 and 0); 2-D: matrices, large enough for peaked attention.
            p.add_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.1))
    return model


def logits_difference(model: Decoder, hf_model: torch.nn.Module, ids: torch.Tensor) -> float:
    with torch.no_grad():
        ours, _ = model(ids)
        theirs = hf_model(input_ids=ids).logits
    assert theirs.shape == ours.shape
    assert ours.abs().max() > 1.0, "logits this small would hide mapping mistakes"
    return float((ours - theirs).abs().max())


def random_ids(config: ModelConfig, batch: int = 2) -> torch.Tensor:
    return torch.randint(
        0, config.vocab_size, (batch, config.context_length), generator=torch.Generator().manual_seed(1)
    )


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    docs = [
        Document(f"doc{i}", f"def function_{i}(x):\n    return x * {i} + 'text, with punctuation!'\n")
        for i in range(40)
    ]
    return train_tokenizer(docs, vocab_size=300)


# Spaces before punctuation (a decode with clean-up would drop them), non-ASCII, and the literal text of the
# end-of-text token, which octlm encodes as plain bytes and the exported tokenizer must too.
TEXT = "def function_7(x):\n    return x * 7 + 'hello , world !' # ünïcödé 🙂 <|endoftext|> end"


def check_folder(out: Path, model: Decoder, tokenizer: Tokenizer) -> None:
    """The folder loads with the Auto classes and reproduces octlm's logits and token ids."""
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ids = tokenizer.encode(TEXT)
    # EOT first, as octlm.generation.generate.encode_prompt does; without special tokens the bare ids.
    assert hf_tokenizer(TEXT)["input_ids"] == [tokenizer.eot_id, *ids] == encode_prompt(tokenizer, TEXT)
    assert hf_tokenizer(TEXT, add_special_tokens=False)["input_ids"] == ids
    assert tokenizer.eot_id not in ids
    assert hf_tokenizer.decode(ids) == TEXT == tokenizer.decode(ids)
    assert hf_tokenizer.decode([tokenizer.eot_id, *ids], skip_special_tokens=True) == TEXT
    assert hf_tokenizer.decode([tokenizer.eot_id, *ids]) == "<|endoftext|>" + TEXT
    assert hf_tokenizer.eos_token == "<|endoftext|>" and hf_tokenizer.eos_token_id == tokenizer.eot_id
    assert hf_tokenizer.bos_token_id == tokenizer.eot_id
    assert hf_model.config.eos_token_id == tokenizer.eot_id
    settings = hf_model.generation_config
    assert settings.bos_token_id == settings.eos_token_id == settings.pad_token_id == tokenizer.eot_id
    # The bare tokenizers library (what the site's @huggingface/tokenizers reads) adds the EOT too.
    backend = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert backend.encode("class").ids == [tokenizer.eot_id, *tokenizer.encode("class")]
    batch = torch.tensor([ids[: model.config.context_length]])
    diff = logits_difference(model, hf_model, batch)
    print(f"exported {type(hf_model).__name__} max |logit difference| = {diff:.3g}")
    assert diff <= TOL


def tiny_run(tmp_path: Path, tokenizer: Tokenizer, model_config: ModelConfig) -> tuple[Path, Decoder]:
    """A run folder as `octlm train` leaves it: checkpoint/ through save_checkpoint, plus tokenizer.json."""
    run_dir = tmp_path / "runs" / "tiny"
    model = random_model(model_config)
    save_checkpoint(
        run_dir,
        model,
        None,
        Config(model=model_config, name="tiny"),
        step=3,
        state={"sha256": {"tokenizer": tokenizer.sha256}},
    )
    tokenizer.save(run_dir / "tokenizer.json")
    return run_dir, model
