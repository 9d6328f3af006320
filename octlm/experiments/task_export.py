"""A task battery model (`octlm experiment tasks`) for the browser: its ONNX graph and its task's vocabulary.

    <out>/model.onnx  ids [B, T] int64 -> logits [B, T, V] (float32, 1 <= T <= max length), and
                      whatever else `octlm.interop.onnx_export.write_onnx` adds (per-layer attention); a
                      page reads logits
    <out>/task.json   the task, its vocabulary (symbol of each id), the special ids, the longest input the
                      graph takes, the ONNX check and the file sizes

A task model has no tokenizer.json (the battery's tasks spell their sequences in their own small
vocabularies, `octlm.experiments.tasks`), so the vocabulary travels as a list instead. The graph is written
and checked by the ONNX exporter's own `write_checked_onnx`; a learned table's graph stops at its rows.

`greedy_answer` is the decoding the site repeats in onnxruntime-web: from a prompt that ends in `<sep>`,
append the argmax token until `<eos>` or a fixed number of tokens.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from octlm.config import ModelConfig
from octlm.experiments.tasks import EOS, SEP, SPECIALS, Copy, Passkey, Task, filler_text
from octlm.interop.export_folder import sibling, swap_in
from octlm.interop.onnx_export import ONNX_FILE, OPSET, write_checked_onnx
from octlm.model.decoder import Decoder

TASK_FILE = "task.json"
FORMAT = "octlm-task-onnx"


def load_task_model(path: Path) -> tuple[Decoder, dict[str, Any]]:
    """The model saved by scripts/site-task-models (`{"config", "state", ...}`, torch.save) in eval mode, and
    everything saved with it."""
    saved = torch.load(path, map_location="cpu", weights_only=True)  # plain data: loading runs no code
    model = Decoder(ModelConfig(**saved["config"]))
    model.load_state_dict(saved["state"])
    return model.eval(), saved


def graph_length(task: type[Task], model: Decoder, sizes: list[int]) -> int:
    """The longest input the graph takes: the longest example of `sizes` less its last token (`<eos>` is
    predicted, never read), at most the rows of a learned table."""
    longest = max(task.max_tokens(size) for size in sizes) - 1
    rows = model.positions.max_length
    return longest if rows is None else min(longest, rows)


@torch.no_grad()
def greedy_answer(model: Decoder, prompt: list[int], max_new: int) -> list[int]:
    """The tokens `model` appends to `prompt` (ids, `<bos>` first), each its argmax given all before it, until
    it writes `<eos>` (included) or `max_new` tokens, or the input would pass a learned table's rows."""
    ids, rows = list(prompt), model.positions.max_length
    out: list[int] = []
    while len(out) < max_new and (rows is None or len(ids) <= rows):
        logits, _ = model(torch.tensor([ids]))
        token = int(logits[0, -1].argmax())
        out.append(token)
        ids.append(token)
        if token == EOS:
            break
    return out


def task_info(task: type[Task], model: Decoder, length: int) -> dict[str, Any]:
    """task.json without the check and file sizes: what a page needs to spell inputs and read the graph."""
    mc = model.config
    return {
        "format": FORMAT,
        "task": task.name,
        "scheme": mc.position,
        "vocabulary": list(task.vocabulary()),
        "specials": {name.strip("<>"): i for i, name in enumerate(SPECIALS)},
        "train_sizes": list(task.train_sizes),
        "counts": task.counts,
        "context_length": length,  # the longest input the graph takes
        "train_length": mc.context_length,
        "vocab_size": mc.vocab_size,
        "d_model": mc.d_model,
        "n_layers": mc.n_layers,
        "n_heads": mc.n_heads,
        "nope_layers": list(mc.nope_layers),
        "opset": OPSET,
        "inputs": {"ids": ["batch", "length"]},
        "outputs": {"logits": ["batch", "length", "vocab"]},
    }


def export_task_model(model: Decoder, task: type[Task], out: Path, length: int) -> dict[str, Any]:
    """Write model.onnx and task.json for `model` (trained on `task`) into the folder `out`, replacing what is
    there only once both are written and the graph's logits match PyTorch's within CHECK_TOLERANCE.
    Returns task.json's contents (file sizes in bytes under "files")."""
    if len(task.vocabulary()) != model.config.vocab_size:
        raise ValueError(
            f"{task.name} has {len(task.vocabulary())} symbols, the model {model.config.vocab_size}"
        )
    info = task_info(task, model.eval(), length)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = sibling(out, "tmp")
    tmp.mkdir()
    try:
        error = write_checked_onnx(model, tmp / ONNX_FILE, length, length)
        info["checked"] = {"length": length, "max_logit_difference": error}
        info["files"] = {ONNX_FILE: (tmp / ONNX_FILE).stat().st_size}
        (tmp / TASK_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        swap_in(tmp, out, force=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


# ------------------------------------------------------------------------------------------------------------
# Examples the site rebuilds: drawn by the battery's own generators, with the choices a user makes on the
# page


def copy_case(seed: int, size: int) -> dict[str, Any]:
    """A copy example drawn by `Copy.example` from `default_rng(seed)`: its items as letters, its tokens and
    which of them answer."""
    example = Copy.example(np.random.default_rng(seed), size)
    items = Copy.text(example.tokens[1 : 1 + size])
    return {"task": "copy", "items": items, "tokens": list(example.tokens), "answer": list(example.answer)}


def passkey_case(sample: str, seed: int, size: int, depth: float) -> dict[str, Any]:
    """A passkey example (`Passkey.example_at`, the battery's) drawn from `default_rng(seed)` with `sample` as
    its filler text, and what a page needs to draw the same one: where its filler starts in `sample`, and its
    key."""
    # the page cuts from its committed sample (filler.txt), so the generator cuts from the same text; the
    # filler repeats, so `start` is the first place its cut occurs, which spells the same example
    example = Passkey.example_at(np.random.default_rng(seed), size, depth, text=sample)
    text = Passkey.text(example.tokens[1 : example.tokens.index(SEP)])
    key = Passkey.text(example.answer_tokens[:-1])
    needle = Passkey.needle(key)
    cut = text.index(needle)
    filler = text[:cut] + text[cut + len(needle) :]
    return {
        "task": "passkey",
        "start": sample.index(filler),
        "size": size,
        "depth": depth,
        "key": key,
        "tokens": list(example.tokens),
        "answer": list(example.answer),
    }


def prompt_of(case: dict[str, Any]) -> list[int]:
    """The tokens a model reads before its answer: through `<sep>`."""
    tokens = case["tokens"]
    return tokens[: tokens.index(SEP) + 1]


def task_fixtures(add: Callable[..., None]) -> None:
    """Examples of the task battery's copy and passkey tasks, drawn by their own generators, with the choices
    the Tasks page makes (the items; the filler's start, the key, the depth): web/src/tasks.ts must spell each
    one token for token. Passkey's filler is a fixed sample of Mohtashami & Jaggi's sentences (what the
    page's filler.txt holds), cut at a start the generator draws."""
    src = "octlm/experiments/tasks.py"
    sample = filler_text(400)
    copies = [copy_case(seed, size) for seed, size in ((0, 1), (1, 8), (2, 3), (3, 64))]
    # sizes and depths where depth x size falls on a half (7.5, 2.5, 12.5): the rounding is exercised
    passkeys = [
        passkey_case(sample, seed, size, depth)
        for seed, (size, depth) in enumerate(
            [(8, 0.0), (30, 0.25), (10, 0.25), (32, 0.5), (25, 0.5), (64, 0.75), (256, 1.0), (40, 0.3)]
        )
    ]
    add(
        "task_examples",
        "copy: the items (letters) give tokens and answer; passkey: sample[start : start + size] "
        "as filler, key at depth give tokens and answer (Copy.example and Passkey.example_at)",
        [
            *(
                {
                    "inputs": {"task": "copy", "items": c["items"]},
                    "output": {"tokens": c["tokens"], "answer": c["answer"]},
                }
                for c in copies
            ),
            *(
                {
                    "inputs": {
                        "task": "passkey",
                        "sample": sample,
                        "start": c["start"],
                        "size": c["size"],
                        "depth": c["depth"],
                        "key": c["key"],
                    },
                    "output": {"tokens": c["tokens"], "answer": c["answer"]},
                }
                for c in passkeys
            ),
        ],
        src,
    )
