"""Task models for the site: the exported graph gives PyTorch's logits, task.json spells the task's vocabulary,
greedy decoding matches an independent onnxruntime loop, and the site's examples are the battery generator's."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from octlm.config import ModelConfig  # noqa: E402
from octlm.experiments.task_export import (  # noqa: E402
    TASK_FILE,
    copy_case,
    export_task_model,
    graph_length,
    greedy_answer,
    load_task_model,
    passkey_case,
    prompt_of,
)
from octlm.experiments.tasks import BOS, EOS, SEP, Copy, Passkey, filler_text  # noqa: E402
from octlm.model.decoder import Decoder  # noqa: E402

LOGIT_TOL = 1e-4  # the site's parity bound; float32 rounding here is about 1e-6


def tiny(scheme: str, task: type = Copy, rows: int = 19) -> Decoder:
    """A small decoder for `task`'s vocabulary, weights moved off their init so that argmaxes are not ties."""
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=len(task.vocabulary()),
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=64,
        context_length=rows,
        position=scheme,
    )
    model = Decoder(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model.eval()


@pytest.fixture(scope="module", params=["learned", "alibi"])
def exported(request, tmp_path_factory):
    model = tiny(request.param)
    out = tmp_path_factory.mktemp("task") / request.param
    length = graph_length(Copy, model, [8, 16])
    info = export_task_model(model, Copy, out, length)
    return model, out, info


def test_graph_length_stops_at_a_learned_table():
    # copy of 16 items: <bos>, 16, <sep>, 16, <eos> = 35 tokens, 34 read; a learned table of 19 rows reads 19
    assert graph_length(Copy, tiny("alibi"), [8, 16]) == 34
    assert graph_length(Copy, tiny("learned"), [8, 16]) == 19


def test_graph_gives_pytorchs_logits(exported):
    model, out, info = exported
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    for length in (1, 7, info["context_length"]):
        ids = (torch.arange(length) * 5 + 1) % model.config.vocab_size
        (logits,) = session.run(["logits"], {"ids": ids[None].numpy()})
        with torch.no_grad():
            reference, _ = model(ids[None])
        assert np.abs(logits - reference.numpy()).max() <= LOGIT_TOL


def test_task_json_spells_the_vocabulary(exported):
    model, out, info = exported
    written = json.loads((out / TASK_FILE).read_text())
    assert written == info
    assert written["vocabulary"] == ["<pad>", "<bos>", "<sep>", "<eos>", *"abcdefghijklmnop"]
    assert written["specials"] == {"pad": 0, "bos": BOS, "sep": SEP, "eos": EOS}
    assert written["files"]["model.onnx"] == (out / "model.onnx").stat().st_size
    assert written["checked"]["max_logit_difference"] <= LOGIT_TOL


def test_export_replaces_an_earlier_one(exported, tmp_path):
    model, _, _ = exported
    out = tmp_path / "m"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    export_task_model(model, Copy, out, 8)
    assert sorted(p.name for p in out.iterdir()) == ["model.onnx", "task.json"]


def test_export_refuses_another_tasks_model(tmp_path):
    with pytest.raises(ValueError, match="symbols"):
        export_task_model(tiny("alibi", Passkey), Copy, tmp_path / "m", 8)


def test_greedy_answer_is_onnxruntimes_argmax_loop(exported):
    model, out, info = exported
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    prompt = prompt_of(copy_case(4, 5))
    ids, expected = list(prompt), []
    while len(expected) < 6 and len(ids) <= info["context_length"]:
        (logits,) = session.run(["logits"], {"ids": np.array([ids], dtype=np.int64)})
        token = int(logits[0, -1].argmax())
        expected.append(token)
        ids.append(token)
        if token == EOS:
            break
    assert greedy_answer(model, prompt, 6) == expected


class AlwaysEos(torch.nn.Module):
    """An output head whose argmax is `<eos>` everywhere, the runner-up the token after it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*x.shape[:-1], len(Copy.vocabulary()))
        logits[..., EOS] = 2.0
        logits[..., EOS + 1] = 1.0
        return logits


def test_greedy_answer_stops_at_eos():
    model = tiny("alibi")
    model.head = AlwaysEos()
    assert greedy_answer(model, [BOS, 4, 5, SEP], 9) == [EOS]


def test_greedy_answer_stops_at_a_learned_tables_rows():
    model = tiny("learned", rows=6)
    model.head = AlwaysEos()
    model.head.forward = lambda x: torch.nn.functional.one_hot(torch.full(x.shape[:-1], 5), 20).float()
    # 4 prompt tokens: inputs of 4, 5 and 6 tokens fit the 6 rows, a 7th would not
    assert greedy_answer(model, [BOS, 4, 5, SEP], 9) == [5, 5, 5]


def test_saved_model_loads_in_eval_mode(tmp_path):
    model = tiny("rope")
    path = tmp_path / "rope.pt"
    torch.save({"config": vars(model.config).copy(), "state": model.state_dict(), "info": {}}, path)
    loaded, saved = load_task_model(path)
    ids = torch.tensor([[1, 4, 5, 2]])
    assert not loaded.training and saved["info"] == {}
    with torch.no_grad():
        assert torch.equal(loaded(ids)[0], model(ids)[0])


def test_copy_case_is_the_generators_example():
    case = copy_case(7, 6)
    example = Copy.example(np.random.default_rng(7), 6)
    assert case["tokens"] == list(example.tokens) and case["answer"] == list(example.answer)
    ids = Copy.ids(case["items"])
    assert case["tokens"] == [BOS, *ids, SEP, *ids, EOS] and len(case["items"]) == 6


@pytest.mark.parametrize(("size", "depth"), [(24, 0.0), (30, 0.5), (31, 0.75), (40, 1.0)])
def test_passkey_case_rebuilds_from_its_fields(size, depth):
    sample = filler_text(300)
    case = passkey_case(sample, 3, size, depth)
    filler = sample[case["start"] : case["start"] + size]
    cut = math.floor(depth * size + 0.5)  # round half up, as Passkey.example_at
    key = case["key"]
    prompt = f"{filler[:cut]} The pass key is {key}. Remember it. {key} is the pass key. {filler[cut:]}"
    assert case["tokens"] == [BOS, *Passkey.ids(prompt), SEP, *Passkey.ids(case["key"]), EOS]
    assert case["answer"] == [False] * (len(prompt) + 2) + [True] * 6
    assert len(case["key"]) == 5 and case["key"].isdigit()
    assert prompt_of(case) == case["tokens"][: len(prompt) + 2]


def test_passkey_case_is_the_generators_example():
    """The page's example is the battery's own draw, not a format of the site's."""
    sample = filler_text(300)
    case = passkey_case(sample, 5, 32, 0.25)
    example = Passkey.example_at(np.random.default_rng(5), 32, 0.25, text=sample)
    assert case["tokens"] == list(example.tokens) and case["answer"] == list(example.answer)
