"""An exported run generates what `octlm generate` generates: for every scheme that exports (learned -> GPT-2,
RoPE -> Llama, RoPE with NoPE layers -> SmolLM3, partial RoPE -> GPT-NeoX, ALiBi -> MPT), a tiny trained run is
exported, and `AutoTokenizer` + `AutoModelForCausalLM.generate(do_sample=False)` give token for token the ids
of octlm's greedy generation (`octlm.generation.generate`, what `octlm generate --temperature 0` calls), the
`<|endoftext|>` that octlm puts before every prompt included.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_models import SMALL_GPT2, random_model, tokenizer  # noqa: E402, F401 (tokenizer: the fixture)
from tiny import tiny_config, write_train_corpus  # noqa: E402

from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.generation.generate import encode_prompt, generate  # noqa: E402
from octlm.interop.hf import export_hf, export_hf_model  # noqa: E402
from octlm.storage.checkpoint import load_model  # noqa: E402
from octlm.training.loop import train  # noqa: E402

# Largest |step logit difference| measured on this machine: 7.9e-6 (SmolLM3), the others 2-5e-6; trained at a
# high rate the logits are larger than hf_models.py's random ones, so its TOL (1e-5) would leave no margin.
TOL = 3e-5
PROMPTS = ["class", "def value", "return self.data"]
NEW_TOKENS = 12  # the longest prompt (EOT + 3-6 tokens) plus these stays inside the learned table's 32 rows
CONTEXT = 32
# Long enough, at a high enough rate, that greedy continuations differ from prompt to prompt (checked below).
TRAIN = {
    "steps": 150,
    "lr": 1e-2,
    "warmup_steps": 10,
    "eval_interval": 150,
    "checkpoint_interval": 150,
    "sample_tokens": 0,
}
NO_BIAS = {"bias": False}
SCHEMES = {  # the transformers model_type each exports to -> the [model] settings on top of the tiny run's
    "gpt2": {"position": "learned"},
    "llama": {"position": "rope", "norm": "rmsnorm", "mlp": "swiglu", **NO_BIAS},
    "smollm3": {
        "position": "rope",
        "norm": "rmsnorm",
        "mlp": "swiglu",
        "n_layers": 2,
        "nope_layers": [1],
        **NO_BIAS,
    },
    "gpt_neox": {"position": "rope", "rope_fraction": 0.5},
    "mpt": {"position": "alibi", "d_ff": 128, **NO_BIAS},  # MPT's MLP is 4 x d_model = 128
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_train_corpus(tmp_path_factory.mktemp("corpus"))


def trained_export(tmp_path: Path, corpus: Path, model_type: str) -> tuple[Path, Path]:
    """A tiny run of this shape trained for 150 steps, and its export: (run folder, export folder)."""
    model = {"context_length": CONTEXT, **SCHEMES[model_type]}
    config = tiny_config(tmp_path, corpus, model=model, run_name=model_type, **TRAIN)
    result = train(config, progress=False)
    return result.run_dir, export_hf(result.run_dir, tmp_path / "hf")


@pytest.mark.parametrize("model_type", SCHEMES)
def test_export_generates_what_octlm_generates(model_type: str, tmp_path: Path, corpus: Path) -> None:
    run_dir, out = trained_export(tmp_path, corpus, model_type)
    model, _config, run_tokenizer = load_model(run_dir)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_model.config.model_type == model_type
    continuations, worst = [], 0.0
    for prompt in PROMPTS:
        prompt_ids = encode_prompt(run_tokenizer, prompt)  # [EOT, ...the prompt's ids]
        ours = list(generate(model, run_tokenizer, prompt_ids, NEW_TOKENS, temperature=0.0, notice=None))
        encoded = hf_tokenizer(prompt, return_tensors="pt")
        assert encoded["input_ids"][0].tolist() == prompt_ids
        with torch.no_grad():
            result = hf_model.generate(
                **encoded,
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
                return_dict_in_generate=True,
                output_logits=True,
            )
            out_ids = result.sequences[0].tolist()
            assert out_ids[len(prompt_ids) :] == ours, prompt
            # Each step's logits, against octlm's full pass over the same tokens (row t predicts token t + 1).
            full, _ = model(torch.tensor([out_ids[:-1]]))
        steps = torch.cat(result.logits)  # [new tokens, V]
        diff = float((steps - full[0, len(prompt_ids) - 1 :]).abs().max())
        worst = max(worst, diff)
        assert diff <= TOL, (prompt, diff)
        text = run_tokenizer.decode([i for i in ours if i != run_tokenizer.eot_id])
        assert hf_tokenizer.decode(out_ids, skip_special_tokens=True) == prompt + text
        continuations.append(ours)
    print(
        f"{model_type}: greedy ids equal for {len(PROMPTS)} prompts, max |step logit difference| {worst:.3g}"
    )
    # A model that says the same thing after every prompt would make the comparison weak.
    assert len({tuple(c) for c in continuations}) > 1, continuations


def test_export_never_generates_ids_the_tokenizer_lacks(tokenizer: Tokenizer, tmp_path: Path) -> None:  # noqa: F811
    """A model vocabulary larger than the tokenizer's: octlm never picks the extra ids, and neither does the
    export (its generation config suppresses them), so greedy decoding still agrees."""
    config = dataclasses.replace(SMALL_GPT2, vocab_size=tokenizer.vocab_size + 40, tie_embeddings=False)
    model = random_model(config, seed=3)
    prompt_ids = encode_prompt(tokenizer, "def")
    with torch.no_grad():  # an extra id made the raw model's first choice, or this test could not fail
        first = model(torch.tensor([prompt_ids]))[0][0, -1]
        model.head.weight[tokenizer.vocab_size] = 2 * model.head.weight[int(first.argmax())]
        raw = model(torch.tensor([prompt_ids]))[0][0, -1].argmax()
    assert float(first.max()) > 0 and int(raw) == tokenizer.vocab_size
    out = export_hf_model(model, tokenizer, tmp_path / "hf")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert hf_model.generation_config.suppress_tokens == list(range(tokenizer.vocab_size, config.vocab_size))
    ours = list(generate(model, tokenizer, prompt_ids, 16, temperature=0.0, notice=None))
    with torch.no_grad():
        theirs = hf_model.generate(torch.tensor([prompt_ids]), max_new_tokens=16, do_sample=False)[0]
    assert theirs[len(prompt_ids) :].tolist() == ours
    assert max(ours) < tokenizer.vocab_size
