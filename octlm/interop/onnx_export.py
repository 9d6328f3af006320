"""`octlm export onnx`: a trained run as one ONNX graph for a full forward pass, attention included.

    ids [B, T] int64 -> logits [B, T, V], attn_0 .. attn_{L-1} [B, H, T, T],   (float32, 1 <= T <= max length)
                        token_rows, embedded [B, T, C], q_0, q_rot_0 [B, H, T, D],
                        k_0, k_rot_0 [B, Hkv, T, D], bias_0 [B, H, T, T]

The explainer site runs it in the browser (onnxruntime-web) to show bits per token along a text, the
attention pattern of any layer and head, and the first layer's numbers (`FIRST_LAYER`): the token rows, the
residual stream after the scheme's embed hook, layer 0's queries and keys before and after its rotate hook,
and the additive position term on layer 0's scores. All are the model's own tensors, as its hooks took and
gave them (`FirstLayerProbe`), so the probabilities and the first layer's numbers are the very ones that made
the logits. model.json's "signal" says where the scheme's position signal enters (`signal`).
The model attends through `scaled_dot_product_attention`, which never materialises them. For export only,
`octlm.model.decoder.attention`, the one function every layer calls, is swapped for `explicit_attention`
(octlm/model/attention_record.py): softmax(q·kᵀ/√D + bias + causal mask)·v, which also records the softmax it
computed. Everything else in the graph is the model's own code: its blocks, norms and MLPs, and the scheme's
embed / rotate / bias hooks.

Two schemes grow their tables on demand, from the value of the last position: the sinusoidal table and RoPE's
cos/sin. A data-dependent branch cannot live in a graph, so `FixedTables` grows them once to the export's
longest length and then reads them exactly as the scheme does (a RoPE model's scaled frequencies included,
`--rope-scaling`). Dynamic NTK changes the frequencies with each text's length, which fixed tables cannot
hold, so it is refused.

PaTH solves a triangular system per 64-token chunk, and ONNX has neither the solve nor a loop whose count
depends on the length: while the export traces it, `path_as_one_chunk` hands PaTH the whole text as one chunk
and a solve made of matrix products (`householder.solve_unit_lower_by_doubling`), the same numbers to float32
rounding.

The exporter is torch's default one (`torch.onnx.export(dynamo=True)`: torch.export, then onnxscript): batch
and length are declared dynamic with their ranges and checked symbolically, where the deprecated TorchScript
exporter traces one example and silently freezes what depends on its shape. The folder holds model.onnx (one
file, weights inside), the run's tokenizer.json with a post-processor that puts `<|endoftext|>` first (as
`octlm generate` starts every prompt; `octlm.interop.hf.prompt_tokenizer`), and model.json (what a page needs
to know, `eot_id` among it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from octlm.errors import UserError, writing
from octlm.interop.export_folder import check_out, sibling, swap_in
from octlm.interop.hf import prompt_tokenizer
from octlm.model.attention_record import recording_attention
from octlm.model.decoder import Decoder
from octlm.positions import PositionScheme, householder
from octlm.positions.absolute import SinusoidalPositions
from octlm.positions.forgetting import ForgettingPositions, decay_bias
from octlm.positions.formulas import add_positions
from octlm.positions.rope_scaling import METHODS, scaled_frequencies
from octlm.positions.rotary import RotaryPositions
from octlm.positions.scheme import AttentionCall

ONNX_FILE, TOKENIZER_FILE, INFO_FILE = "model.onnx", "tokenizer.json", "model.json"
FORMAT = "octlm-onnx"  # model.json's mark: --force replaces only a folder that carries it
OPSET = 18  # the opset torch 2.13's exporter writes natively (no version conversion); onnxruntime-web runs it
DEFAULT_MAX_LENGTH = (
    1024  # the length experiment's longest evaluation length (octlm/experiments/length.py, FULL)
)
LENGTH_RANGE = (2, 65536)  # torch.export needs a range of at least two lengths; 65,536: tables stay small
STATIC_SCALING = ("linear", "ntk", "yarn")  # rope_scaling methods with one set of frequencies for all lengths
CHECK_TOLERANCE = 1e-3  # |logit| difference past which the written graph is wrong, not merely rounded
# The first layer's outputs, after logits and attn_*, in this order (the Models page reads them by name).
FIRST_LAYER = ("token_rows", "embedded", "q_0", "k_0", "q_rot_0", "k_rot_0", "bias_0")
# model.json's "signal": where a scheme's position signal enters, from the hooks it overrides
# (PositionScheme.hooks). A scheme that computes attention itself is "attend" whatever else it overrides.
SIGNALS = {
    "embed": "embed",
    "rotate": "rotate",
    "bias": "bias",
    "contextual_bias": "bias",
    "attend": "attend",
}


# ------------------------------------------------------------------------------------------------------------
# The graph


class FixedTables(PositionScheme):
    """`scheme`, with the tables it grows on demand grown once to `length` rows and read without a branch.

    Sinusoidal: the table `[length, C]`; RoPE and its variants: every table the scheme builds (`tables`: cos
    and sin `[length, rotary_dims/2]`, xPos's key tables too), scaled frequencies and attention scaling
    included, turned by the scheme's own plain formula. Every other scheme, its bias and contextual bias
    included, is passed through unchanged.
    """

    def __init__(self, scheme: PositionScheme, length: int) -> None:
        super().__init__()
        self.scheme, self.name, self.max_length = scheme, scheme.name, length
        for name in ("table", "cos", "sin", "key_cos", "key_sin"):  # buffers: the graph's named initializers
            self.register_buffer(name, None, persistent=False)
        positions = torch.arange(length)
        if isinstance(scheme, SinusoidalPositions):
            scheme.embed(torch.zeros(1, length, scheme.width), positions)  # grows scheme.table
            self.table = scheme.table[:length].clone()
        elif isinstance(scheme, RotaryPositions):
            probe = torch.zeros(1, 1, length, scheme.head_dim)
            scheme.rotate(probe, probe, positions)  # grows the scheme's tables
            for name in scheme.tables:
                setattr(self, name, getattr(scheme, name)[:length].clone())

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """`[B, T, C]` plus the rows at `positions` `[T]` (SinusoidalPositions.embed without the growth)."""
        if self.table is None:
            return self.scheme.embed(x, positions)
        return add_positions(x, self.table[positions].to(x.dtype))

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """q `[B, H, T, D]`, k `[B, Hkv, T, D]` rotated (RotaryPositions.rotate without the growth)."""
        if self.cos is None:
            return self.scheme.rotate(q, k, positions)
        cos, sin = self.cos[positions].to(q.dtype), self.sin[positions].to(q.dtype)
        if self.key_cos is None:
            key_cos, key_sin = cos, sin
        else:  # xPos scales queries and keys inversely: its keys have tables of their own
            key_cos, key_sin = self.key_cos[positions].to(q.dtype), self.key_sin[positions].to(q.dtype)
        return self.scheme.turn(q, cos, sin, fused=False), self.scheme.turn(k, key_cos, key_sin, fused=False)

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor | None:
        return self.scheme.bias(q_positions, k_positions)

    def contextual_bias(
        self, q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int
    ) -> Tensor | None:
        return self.scheme.contextual_bias(q, k, q_positions, k_positions, layer)

    @property
    def is_contextual(self) -> bool:
        return self.scheme.is_contextual

    def attend(self, q: Tensor, k: Tensor, v: Tensor, call: AttentionCall) -> Tensor:
        return self.scheme.attend(q, k, v, call)

    @property
    def replaces_attention(self) -> bool:
        return self.scheme.replaces_attention


class FirstLayerProbe(PositionScheme):
    """Layer 0's scheme (`scheme`, a `FixedTables` or NoPE), recording in `seen` what its hooks take and give.

    `rotate`: q `[B, H, T, D]` and k `[B, Hkv, T, D]` before it ("q_0", "k_0") and after it ("q_rot_0",
    "k_rot_0"); `contextual_bias` (CoPE): the bias it returns, "bias_0" `[B, H, T, T]`; `attend` (FoX): the
    decay its attention adds to the scores, c_i - c_j, from the scheme's own `running_sums` and `decay_bias`
    (the very functions its `attend` calls next, on the same input). Everything else is passed through.
    """

    def __init__(self, scheme: PositionScheme) -> None:
        super().__init__()
        self.scheme, self.name, self.seen = scheme, scheme.name, {}

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        q_rot, k_rot = self.scheme.rotate(q, k, positions)
        self.seen.update(q_0=q, k_0=k, q_rot_0=q_rot, k_rot_0=k_rot)
        return q_rot, k_rot

    def contextual_bias(
        self, q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int
    ) -> Tensor | None:
        bias = self.scheme.contextual_bias(q, k, q_positions, k_positions, layer)
        self.seen["bias_0"] = bias
        return bias

    @property
    def is_contextual(self) -> bool:
        return self.scheme.is_contextual

    def attend(self, q: Tensor, k: Tensor, v: Tensor, call: AttentionCall) -> Tensor:
        fox = getattr(self.scheme, "scheme", self.scheme)  # FixedTables passes FoX through unchanged
        if isinstance(fox, ForgettingPositions) and call.state is None:  # a full pass: no cached gates
            c = fox.running_sums(call.x, call.layer, None, k.shape[2])  # [B, H, T] float64
            self.seen["bias_0"] = decay_bias(c, c, call.q_positions, call.k_positions, q.dtype)
        return self.scheme.attend(q, k, v, call)

    @property
    def replaces_attention(self) -> bool:
        return self.scheme.replaces_attention


def first_layer_bias(seen: dict[str, Tensor], mask: Tensor | None, q: Tensor, positions: Tensor) -> Tensor:
    """bias_0 `[B, H, T, T]`: the bias layer 0 recorded (CoPE, FoX), else the shared mask when it is a bias
    (ALiBi, T5, FIRE: float, the scheme's `bias`), else zeros; for queries `q` `[B, H, T, D]` at `positions`.

    Every hook folds the causal rule into its bias as -inf above the diagonal; those cells are written as 0,
    so that the output is finite (a page's min or max over it stays a number; it draws them as masked)."""
    bias = seen.get("bias_0")
    if bias is None and mask is not None and mask.is_floating_point():
        bias = mask  # [H, T, T]
    B, H, T = q.shape[0], q.shape[1], q.shape[2]
    if bias is None:
        return q.new_zeros(B, H, T, T)
    future = positions.unsqueeze(0) > positions.unsqueeze(1)  # [T, T]: key after query
    return bias.to(q.dtype).masked_fill(future, 0.0).expand(B, H, T, T)


class ProbedDecoder(nn.Module):
    """`Decoder.forward` for a full pass, through the model's own blocks, that also returns every layer's
    attention and the first layer's numbers: ids `[B, T]` -> (logits `[B, T, V]`, attn_0, ..., attn_{L-1}
    each `[B, H, T, T]`, then `FIRST_LAYER` in order: token_rows, embedded `[B, T, C]`, q_0 `[B, H, T, D]`,
    k_0 `[B, Hkv, T, D]`, q_rot_0, k_rot_0 (the same shapes), bias_0 `[B, H, T, T]`)."""

    def __init__(self, model: Decoder, max_length: int) -> None:
        super().__init__()
        self.model, self.scheme = model, FixedTables(model.positions, max_length)

    def forward(self, ids: Tensor) -> tuple[Tensor, ...]:
        m, T = self.model, ids.shape[1]
        positions = torch.arange(T, device=ids.device)
        token_rows = m.token_embedding(ids)  # [B, T, C]
        x = self.scheme.embed(token_rows, positions)
        embedded = x
        # the same masks the model builds for this pass; layers in nope_layers use NoPE's
        masks = {
            False: m._attention_mask(positions, positions),
            True: m._attention_mask(positions, positions, m.no_positions),
        }
        record: list[Tensor] = []
        probe = FirstLayerProbe(m.no_positions if 0 in m.config.nope_layers else self.scheme)
        with recording_attention(record):
            for layer, block in enumerate(m.blocks):
                plain = layer in m.config.nope_layers
                scheme = probe if layer == 0 else m.no_positions if plain else self.scheme
                x = block(x, positions, scheme, *masks[plain], None, layer)
        if len(record) != len(
            m.blocks
        ):  # octlm.model.decoder stopped calling `attention`: the hook went stale
            raise RuntimeError(
                f"recorded {len(record)} attention layers of {len(m.blocks)}; see recording_attention"
            )
        seen = probe.seen
        bias = first_layer_bias(seen, masks[0 in m.config.nope_layers][0], seen["q_rot_0"], positions)
        first = (token_rows, embedded, seen["q_0"], seen["k_0"], seen["q_rot_0"], seen["k_rot_0"], bias)
        return (m.head(m.norm(x)), *record, *first)


def output_names(n_layers: int) -> list[str]:
    """The graph's outputs in order: logits, every layer's attention, then the first layer's numbers."""
    return ["logits"] + [f"attn_{layer}" for layer in range(n_layers)] + list(FIRST_LAYER)


def output_shapes(n_layers: int) -> dict[str, list[str]]:
    """Each output's axes by name, for model.json."""
    rows, scores = ["batch", "length", "d_model"], ["batch", "head", "length", "length"]
    queries, keys = ["batch", "head", "length", "head_dim"], ["batch", "kv_head", "length", "head_dim"]
    shapes = {
        "logits": ["batch", "length", "vocab"],
        "token_rows": rows,
        "embedded": rows,
        "q_0": queries,
        "k_0": keys,
        "q_rot_0": queries,
        "k_rot_0": keys,
        "bias_0": scores,
    }
    return {name: shapes.get(name, scores) for name in output_names(n_layers)}  # attn_*: scores' axes


def position_signal(scheme: type[PositionScheme]) -> str:
    """How a scheme's position signal enters the model (`SIGNALS`): "embed", "rotate", "bias", "attend", or
    "none" for a scheme that overrides no hook (NoPE)."""
    kinds = [SIGNALS[hook] for hook in scheme.hooks()]
    return "attend" if "attend" in kinds else kinds[0] if kinds else "none"


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter's progress lines, torchvision notices and deprecation warnings: stderr is for one line."""
    quiet = [
        logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript")
    ]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def path_as_one_chunk(max_length: int) -> Iterator[None]:
    """PaTH's attention in a form a graph can hold, while the export traces it: every text of up to
    `max_length` tokens as one chunk (a full pass has no earlier keys, so one chunk is the same sum as many;
    the chunk loop's count would depend on the length), its triangular system solved by doubling
    (`householder.solve_unit_lower_by_doubling`: matrix products only). The graph then costs
    O(T³ log T) per head for T tokens where the chunked solve costs O(T² · 64); PyTorch's own pass, the
    export's check included, is unchanged."""
    steps = max(1, math.ceil(math.log2(max_length)))
    saved = householder.CHUNK_TOKENS, householder.solve_unit_lower
    householder.CHUNK_TOKENS = max(max_length, householder.CHUNK_TOKENS)
    householder.solve_unit_lower = lambda system, rhs: householder.solve_unit_lower_by_doubling(
        system, rhs, steps
    )
    try:
        yield
    finally:
        householder.CHUNK_TOKENS, householder.solve_unit_lower = saved


def write_onnx(model: Decoder, path: Path, max_length: int) -> None:
    """Write `model` (eval mode, CPU) to the single file `path` as a graph over ids `[B, T]`,
    T <= max_length."""
    probed = ProbedDecoder(model.eval(), max_length).eval()
    example = torch.arange(2 * min(max_length, 8)).reshape(2, -1) % model.config.vocab_size
    dims = {0: torch.export.Dim("batch", min=1), 1: torch.export.Dim("length", min=1, max=max_length)}
    with _quiet_exporter(), torch.no_grad(), path_as_one_chunk(max_length):
        program = torch.onnx.export(
            probed,
            (example,),
            dynamo=True,
            dynamic_shapes={"ids": dims},
            input_names=["ids"],
            output_names=output_names(model.config.n_layers),
            opset_version=OPSET,
            verbose=False,
        )
        program.save(str(path), external_data=False)  # one file: the browser fetches one URL per model


def check_onnx(path: Path, model: Decoder, length: int) -> float:
    """Max |logit difference| between onnxruntime on `path` and `model` for one fixed `[1, length]` text."""
    import onnxruntime

    ids = (torch.arange(length) * 7919 % model.config.vocab_size).unsqueeze(0)  # every part of the table
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"ids": ids.numpy()})
    with torch.no_grad():
        reference, _ = model(ids)
    return float((torch.from_numpy(logits) - reference).abs().max())


# ------------------------------------------------------------------------------------------------------------
# What is exported


def write_checked_onnx(model: Decoder, path: Path, max_length: int, check_length: int) -> float:
    """`write_onnx`, then `check_onnx` at `check_length`: returns the max |logit difference|. Past
    CHECK_TOLERANCE the graph is wrong (an exporter or runtime bug, not rounding): RuntimeError, and the
    caller keeps no such file."""
    write_onnx(model, path, max_length)
    error = check_onnx(path, model, check_length)
    if not error <= CHECK_TOLERANCE:
        raise RuntimeError(f"the ONNX graph's logits differ from PyTorch's by {error:.3g}")
    return error


def need_exporter() -> None:
    """UserError naming the install command when a package of the `onnx` extra is missing."""
    missing = [
        name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise UserError(f"octlm export onnx needs {', '.join(missing)}: pip install 'octlm[onnx]'")


def export_length(model: Decoder, max_length: int | None) -> int:
    """The longest T the graph takes: --max-length, at most a learned table's rows (default: all of them)."""
    rows, scheme = model.positions.max_length, model.config.position
    if max_length is None:
        return rows if rows is not None else max(DEFAULT_MAX_LENGTH, model.config.context_length)
    low, high = LENGTH_RANGE
    if not low <= max_length <= high:
        raise UserError(
            f"--max-length {max_length} is outside [{low}, {high}]; choose a length in that range"
        )
    if rows is not None and max_length > rows:
        raise UserError(
            f"--max-length {max_length} is longer than the {scheme} position table ({rows} rows), "
            f"which has no row past its last one; use --max-length {rows} or less"
        )
    return max_length


def apply_rope_scaling(model: Decoder, method: str | None, factor: float | None, length: int) -> dict | None:
    """Give a RoPE model the frequencies of `method` (rope_scaling.METHODS); None leaves it as trained (with
    `model.rope_scaling`'s, when it was fine-tuned with them).

    `factor` defaults to length / training length (as the length experiment's static factor). Returns what
    model.json records: {"method", "factor"}, or None.
    """
    mc = model.config
    if method is None:
        if factor is not None:
            raise UserError(
                f"--rope-factor {factor} needs --rope-scaling METHOD ({', '.join(STATIC_SCALING)})"
            )
        # A run fine-tuned with rescaled frequencies has them from its config: the graph keeps them.
        return None if mc.rope_scaling == "none" else {"method": mc.rope_scaling, "factor": mc.rope_factor}
    if mc.position != "rope":
        raise UserError(
            f"--rope-scaling {method}: the {mc.position} scheme has no RoPE frequencies to scale; "
            "drop the flag or export a rope run"
        )
    if mc.rope_scaling != "none":
        raise UserError(
            f"--rope-scaling {method}: this run was fine-tuned with model.rope_scaling = "
            f"{mc.rope_scaling!r} (factor {mc.rope_factor:g}), which the export keeps; drop the flag"
        )
    if method == "dynamic":
        raise UserError(
            "--rope-scaling dynamic: dynamic NTK changes RoPE's frequencies with each text's length, "
            "and an ONNX graph holds one fixed cos/sin table; use ntk, linear or yarn"
        )
    if method not in METHODS:
        raise UserError(f"--rope-scaling {method!r} is unknown; choose one of {', '.join(STATIC_SCALING)}")
    factor = max(1.0, length / mc.context_length) if factor is None else float(factor)
    if not (math.isfinite(factor) and factor >= 1):
        raise UserError(f"--rope-factor {factor} must be a finite number of at least 1")
    model.positions.set_frequencies(
        *scaled_frequencies(method, model.positions.rotary_dims, mc.rope_base, factor, mc.context_length)
    )
    return {"method": method, "factor": factor}


def model_info(model: Decoder, length: int, scaling: dict | None, eot_id: int) -> dict[str, Any]:
    """model.json without its file sizes: what a page needs to feed the graph and read its outputs."""
    mc = model.config
    return {
        "format": FORMAT,
        "scheme": mc.position,
        "rope_scaling": scaling,
        "context_length": length,  # the longest input the graph takes
        "train_length": mc.context_length,  # the length the model was trained at
        "vocab_size": mc.vocab_size,
        "n_layers": mc.n_layers,
        "n_heads": mc.n_heads,
        "d_model": mc.d_model,
        "eot_id": eot_id,
        "opset": OPSET,
        "inputs": {"ids": ["batch", "length"]},
        "outputs": output_names(mc.n_layers),
        "output_shapes": output_shapes(mc.n_layers),
        "n_kv_heads": mc.kv_heads,
        "head_dim": mc.head_dim,
        "signal": position_signal(type(model.positions)),
    }


# ------------------------------------------------------------------------------------------------------------
# The folder


def _is_export(folder: Path) -> bool:
    try:
        return json.loads((folder / INFO_FILE).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _not_an_export(out: Path) -> str | None:
    """Why the non-empty folder `out` is no earlier ONNX export (files only, with its model.json), or None."""
    if any(p.is_dir() or p.is_symlink() for p in out.iterdir()) or not _is_export(out):
        return f"is no earlier ONNX export (no {INFO_FILE} of one, or it holds folders)"
    return None


def export_onnx(
    run_dir: str | Path,
    out: str | Path,
    force: bool = False,
    max_length: int | None = None,
    rope_scaling: str | None = None,
    rope_factor: float | None = None,
) -> dict[str, Any]:
    """Export the trained run in `run_dir` to the folder `out`: model.onnx, tokenizer.json, model.json.

    Nothing is left behind when anything fails; with `force` an earlier export is replaced only once the new
    one is complete. Returns model.json's contents (file sizes in bytes under "files").
    """
    from octlm.storage.checkpoint import load_model

    run_dir, out = Path(run_dir), Path(out)
    check_out(out, force, run_dir, "-onnx", _not_an_export)  # before the load: a mistake costs nothing
    need_exporter()
    model, _config, tokenizer = load_model(run_dir)
    if model.positions.onnx_refusal:
        raise UserError(
            f"{model.config.position} models are not exported to ONNX: {model.positions.onnx_refusal}; "
            "run it in octlm (octlm generate, octlm score)"
        )
    length = export_length(model, max_length)
    info = model_info(
        model, length, apply_rope_scaling(model, rope_scaling, rope_factor, length), tokenizer.eot_id
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = sibling(out, "tmp")
    tmp.mkdir()
    try:
        with writing(out):
            checked = min(length, 64)
            error = write_checked_onnx(model, tmp / ONNX_FILE, length, checked)
            # The run's tokenizer with the post-processor that puts EOT first, as octlm's prompts have it.
            (tmp / TOKENIZER_FILE).write_text(prompt_tokenizer(tokenizer).to_str(), encoding="utf-8")
            info["checked"] = {"length": checked, "max_logit_difference": error}  # onnxruntime vs PyTorch
            info["files"] = {name: (tmp / name).stat().st_size for name in (ONNX_FILE, TOKENIZER_FILE)}
            (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        swap_in(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info
