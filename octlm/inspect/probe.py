"""`octlm probe RUN`: what each layer knows of a token's absolute position, read off by linear probes.

A model without position encodings (NoPE) is never told where a token sits, yet Haviv et al. (2022) find that
causal language models learn it anyway: the causal mask lets a token count what came before it. The probe
asks every layer: the embedding output (token + position vector where the scheme adds one) and the residual
stream after each block, captured with forward hooks on the model's blocks (nothing in model.py changes).

On held-out text cut into windows of the run's context length T, each token's vector `[C]` is the input and
its position t in 0..T-1 the target of

- ridge regression, scored by R² and mean absolute error in positions;
- a multinomial logistic regression over `buckets` equal position buckets, scored by accuracy against chance;
- the same two probes trained on labels permuted across the training tokens: the shuffled-label control. A
  probe that memorises rather than reads position scores near chance there.

Windows, not tokens, are split into training and test sets (a probe never sees a test window's other tokens),
and the ridge penalty is chosen from `ALPHAS` by R² on a fifth of the training windows, then refit on all of
them. Ridge is solved in closed form in float64; the classifier is fitted with torch's LBFGS in float64.

    RUN/report/probe/ (or --out DIR): probe.md  probe.json  probe.png
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from octlm.errors import UserError, writing
from octlm.files import write_atomic
from octlm.inspect.figures import plot_probe
from octlm.inspect.render import Block, Heading, Image, Paragraph, Table, render_markdown
from octlm.inspect.validation import text_tokens, validation_tokens
from octlm.storage.jsonable import to_json
from octlm.storage.run import PROBE_DIR, PROBE_FILES

if TYPE_CHECKING:
    from octlm.config import Config
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

# Ridge penalties on standardised features, as the weight of ||w||² beside the *mean* squared error, so the
# grid means the same at any number of tokens.
ALPHAS = tuple(10.0**k for k in range(-6, 3))
LOGISTIC_PENALTY = 1e-4  # the same kind of L2 weight for the classifier: only keeps separable data finite
BUCKETS = 8
DEFAULT_WINDOWS = 128  # 128 x T tokens: 16,384 at T = 128 (a quarter of them held out)
MIN_WINDOWS = 4  # at least 2 training windows (one of them for choosing the penalty) and 1 test window
TEST_FRACTION = 0.25
VALIDATION_FRACTION = 0.2


# ------------------------------------------------------------------------------------------------------------
# The representations


def forward_with_hooks(model: Decoder, ids: torch.Tensor, handles: list[Any]) -> None:
    """One pass of ids `[B, T]` without gradients, for the hooks behind `handles`, which are removed after it
    (also when it fails)."""
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for handle in handles:
            handle.remove()


def capture_layers(model: Decoder, ids: torch.Tensor) -> list[torch.Tensor]:
    """The embedding output and the residual stream after each block for ids `[B, T]`:
    n_layers + 1 `[B, T, C]`.

    A pre-hook on the first block sees its input (the embedding output); a hook on each block its output.
    """
    captured: list[torch.Tensor] = []

    def grab_input(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        captured.append(args[0].detach())

    def grab_output(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
        captured.append(output.detach())

    handles = [model.blocks[0].register_forward_pre_hook(grab_input)]
    handles += [block.register_forward_hook(grab_output) for block in model.blocks]
    forward_with_hooks(model, ids, handles)
    return captured


def layer_names(n_layers: int) -> list[str]:
    return ["embedding"] + [f"block {i}" for i in range(1, n_layers + 1)]


def windows_of(tokens: np.ndarray, length: int, count: int) -> np.ndarray:
    """Up to `count` non-overlapping windows `[W, length]` spread evenly over the stream
    (as evaluation is)."""
    available = len(tokens) // length
    if available < MIN_WINDOWS:
        raise UserError(
            f"the probe needs at least {MIN_WINDOWS} windows of {length} tokens, but the text has "
            f"{len(tokens):,} tokens ({available} windows); give a longer --text"
        )
    starts = np.unique(np.linspace(0, available - 1, min(count, available)).round().astype(np.int64))
    return np.asarray(tokens)[starts[:, None] * length + np.arange(length)].astype(np.int64)


def features(model: Decoder, windows: np.ndarray, batch: int = 16) -> np.ndarray:
    """Every layer's vector of every token: `[n_layers + 1, W, T, C]` float32, from windows `[W, T]`."""
    device = model.token_embedding.weight.device
    chunks = []
    for first in range(0, len(windows), batch):
        ids = torch.from_numpy(windows[first : first + batch]).to(device)
        chunks.append(torch.stack(capture_layers(model, ids)).float().cpu().numpy())
    return np.concatenate(chunks, axis=1)


# ------------------------------------------------------------------------------------------------------------
# The probes (float64)


def standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Features `[N, C]` centred and scaled by the training rows' mean and std
    (constant columns kept at 0)."""
    mean, std = train.mean(0), train.std(0)
    std = np.where(std > 0, std, 1.0)
    return [(x - mean) / std for x in (train, *others)]


def ridge_fit(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Weights `[C]` and intercept minimising mean((x w + b - y)²) + alpha ||w||² (b unpenalised),
    x `[N, C]`."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    mean_x, mean_y = x.mean(0), y.mean()
    xc = x - mean_x
    gram = xc.T @ xc / len(x) + alpha * np.eye(x.shape[1])
    w = np.linalg.solve(gram, xc.T @ (y - mean_y) / len(x))
    return w, float(mean_y - mean_x @ w)


def r2_score(y: np.ndarray, predicted: np.ndarray) -> float:
    """1 - residual sum of squares / total sum of squares around the mean of `y`."""
    return float(1.0 - ((y - predicted) ** 2).sum() / ((y - y.mean()) ** 2).sum())


def choose_alpha(x: np.ndarray, y: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> float:
    """The penalty of `ALPHAS` with the best R² on a fifth of the groups (windows), fitted on the rest."""
    names = rng.permutation(np.unique(groups))
    held = np.isin(groups, names[: max(1, round(len(names) * VALIDATION_FRACTION))])
    fit_x, val_x = standardise(x[~held], x[held])
    scores = []
    for alpha in ALPHAS:
        w, b = ridge_fit(fit_x, y[~held], alpha)
        scores.append(r2_score(y[held], val_x @ w + b))
    best = max(scores)
    return max(a for a, s in zip(ALPHAS, scores, strict=True) if s >= best - 1e-12)  # ties: the larger


def logistic_fit(
    x: np.ndarray, labels: np.ndarray, classes: int, penalty: float = LOGISTIC_PENALTY, max_iter: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression: weights `[C, K]` and biases `[K]` minimising the mean cross-entropy
    + penalty ||W||², by LBFGS (strong Wolfe line search) in float64 from zeros (deterministic)."""
    xt = torch.from_numpy(np.asarray(x, np.float64))
    yt = torch.from_numpy(np.asarray(labels, np.int64))
    w = torch.zeros(x.shape[1], classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(classes, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS(
        [w, b],
        lr=1.0,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=1e-9,
        tolerance_change=1e-12,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = F.cross_entropy(xt @ w + b, yt) + penalty * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimiser.step(closure)
    return w.detach().numpy(), b.detach().numpy()


def bucket_of(positions: np.ndarray, length: int, buckets: int) -> np.ndarray:
    """Equal buckets of positions 0..length-1: bucket = t * buckets // length."""
    return positions * buckets // length


def probe_layer(
    x: np.ndarray, length: int, train: np.ndarray, test: np.ndarray, buckets: int, seed: int
) -> dict[str, Any]:
    """Both probes and their controls on one layer's vectors `[W, T, C]`; `train`/`test`: window indices."""
    rng = np.random.default_rng(seed)
    positions = np.arange(length)
    x = np.asarray(x, np.float64)
    x_train, x_test = x[train].reshape(-1, x.shape[-1]), x[test].reshape(-1, x.shape[-1])
    y_train, y_test = np.tile(positions, len(train)).astype(np.float64), np.tile(positions, len(test))
    groups = np.repeat(np.arange(len(train)), length)
    shuffled = rng.permutation(len(y_train))  # one permutation across all training tokens, for both controls
    s_train, s_test = standardise(x_train, x_test)
    result: dict[str, Any] = {}
    for name, target in (("ridge", y_train), ("ridge_control", y_train[shuffled])):
        alpha = choose_alpha(x_train, target, groups, np.random.default_rng(seed + 1))
        w, b = ridge_fit(s_train, target, alpha)
        predicted = s_test @ w + b
        result[name] = {
            "r2": r2_score(y_test, predicted),
            "mae": float(np.abs(predicted - y_test).mean()),
            "alpha": alpha,
        }
    k_train, k_test = bucket_of(y_train.astype(np.int64), length, buckets), bucket_of(y_test, length, buckets)
    for name, target in (("bucket", k_train), ("bucket_control", k_train[shuffled])):
        w, b = logistic_fit(s_train, target, buckets)
        result[name] = {"accuracy": float(((s_test @ w + b).argmax(1) == k_test).mean())}
    result["chance"] = float(np.bincount(k_test, minlength=buckets).max() / len(k_test))
    return result


def split_windows(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and test window indices: a quarter of the windows (at least one) held out,
    chosen by `seed`."""
    order = np.random.default_rng(seed).permutation(count)
    held = max(1, round(count * TEST_FRACTION))
    return np.sort(order[held:]), np.sort(order[:held])


def probe_model(
    model: Decoder,
    tokens: np.ndarray,
    windows: int = DEFAULT_WINDOWS,
    buckets: int = BUCKETS,
    seed: int = 0,
    on_layer: Callable[[str], object] | None = None,
) -> dict[str, Any]:
    """Probe every layer of `model` on a token stream `[N]`: the numbers of probe.json (without run names).
    `on_layer(name)` is called as each layer's probes start (they take the time: `octlm inspect`'s progress)."""
    length = model.config.context_length
    buckets = min(buckets, length)
    chosen = windows_of(tokens, length, windows)
    vectors = features(model, chosen)  # [L + 1, W, T, C]
    train, test = split_windows(len(chosen), seed)
    layers = []
    for name, v in zip(layer_names(model.config.n_layers), vectors, strict=True):
        if on_layer is not None:
            on_layer(name)
        layers.append({"layer": name, **probe_layer(v, length, train, test, buckets, seed)})
    return {
        "position": model.config.position,
        "context_length": length,
        "n_layers": model.config.n_layers,
        "d_model": model.config.d_model,
        "windows": {"train": len(train), "test": len(test)},
        "tokens": {"train": len(train) * length, "test": len(test) * length},
        "buckets": buckets,
        "alphas": list(ALPHAS),
        "logistic_penalty": LOGISTIC_PENALTY,
        "seed": seed,
        "layers": layers,
    }


# ------------------------------------------------------------------------------------------------------------
# The text, a run, the files


def probe_run(
    run_dir: str | Path,
    text: str | Path | None = None,
    windows: int = DEFAULT_WINDOWS,
    buckets: int = BUCKETS,
    seed: int = 0,
) -> dict[str, Any]:
    """Probe a trained run on its validation stream (or on `text`, a file):
    `probe_model`'s numbers + names."""
    from octlm.storage.checkpoint import load_model

    model, config, tokenizer = load_model(run_dir)
    tokens = validation_tokens(config, tokenizer) if text is None else text_tokens(text, tokenizer)
    result = probe_model(model, tokens, windows, buckets, seed)
    source = (
        f"the run's validation stream (data cache in {config.data.data_dir})" if text is None else str(text)
    )
    return {"run": Path(run_dir).name, "source": source, **result}


def inspect_probe(
    model: Decoder, config: Config, tokenizer: Tokenizer, on_layer: Callable[[str], object] | None = None
) -> dict[str, Any]:
    """For `octlm inspect`: the probe on the validation stream, or {"skipped": why} when it cannot run."""
    try:
        result = probe_model(model, validation_tokens(config, tokenizer), on_layer=on_layer)
    except (UserError, OSError) as error:
        return {"skipped": str(error)}
    return {"source": f"the run's validation stream (data cache in {config.data.data_dir})", **result}


def probe_blocks(result: dict[str, Any], figure: Path | None, level: int = 2) -> list[Block]:
    """The probe's heading, method, table and figure as document blocks."""
    if "skipped" in result:
        return [
            Heading("What each layer knows of position", level),
            Paragraph(f"No probe: {result['skipped']}"),
        ]
    t, k = result["context_length"], result["buckets"]
    alphas = ", ".join(f"{a:g}" for a in result["alphas"])
    method = (
        f"Linear probes for each token's absolute position t in 0..{t - 1} within windows of T = {t} "
        "tokens of "
        f"{result['source']}: {result['windows']['train']} training and {result['windows']['test']} held-out "
        f"windows ({result['tokens']['test']:,} test tokens; split by window, seed {result['seed']}). Ridge "
        f"regression on standardised features, penalty α chosen from {{{alphas}}} by R² on a fifth of the "
        f"training windows; a multinomial logistic regression over {k} equal position buckets (L2 "
        f"{result['logistic_penalty']:g}). Control: the same probes trained on labels permuted across the "
        "training tokens. The mean alone scores R² = 0 and MAE ≈ T/4."
    )
    rows = [
        [
            layer["layer"],
            f"{layer['ridge']['r2']:.3f}",
            f"{layer['ridge']['mae']:.1f}",
            f"{layer['ridge']['alpha']:g}",
            f"{layer['ridge_control']['r2']:.3f}",
            f"{layer['ridge_control']['mae']:.1f}",
            f"{layer['bucket']['accuracy']:.3f}",
            f"{layer['bucket_control']['accuracy']:.3f}",
            f"{layer['chance']:.3f}",
        ]
        for layer in result["layers"]
    ]
    headers = [
        "layer",
        "R²",
        "MAE",
        "α",
        "R² control",
        "MAE control",
        "bucket accuracy",
        "control accuracy",
        "chance",
    ]
    blocks: list[Block] = [
        Heading("What each layer knows of position", level),
        Paragraph(method),
        Table(headers, rows, "lrrrrrrrr"),
    ]
    if figure is not None:
        blocks.append(
            Image(
                figure,
                "R² of the ridge probe and accuracy of the bucket probe against layer; "
                "dashed: the shuffled-label control.",
            )
        )
    return blocks


def comparison_table(results: dict[str, dict[str, Any]]) -> Table:
    """One table of several runs' probes (e.g. one per scheme in the length experiment),
    row per run and layer."""
    rows = [
        [
            name,
            x["layer"],
            f"{x['ridge']['r2']:.3f}",
            f"{x['ridge']['mae']:.1f}",
            f"{x['ridge_control']['r2']:.3f}",
            f"{x['bucket']['accuracy']:.3f}",
            f"{x['bucket_control']['accuracy']:.3f}",
            f"{x['chance']:.3f}",
        ]
        for name, result in results.items()
        for x in result["layers"]
    ]
    headers = ["run", "layer", "R²", "MAE", "R² control", "bucket accuracy", "control accuracy", "chance"]
    return Table(headers, rows, "llrrrrrr")


def draw_probe(result: dict[str, Any], path: Path) -> Path:
    layers = result["layers"]
    panels = [
        (
            "ridge R² (position)",
            [x["ridge"]["r2"] for x in layers],
            [x["ridge_control"]["r2"] for x in layers],
            None,
        ),
        (
            f"accuracy over {result['buckets']} position buckets",
            [x["bucket"]["accuracy"] for x in layers],
            [x["bucket_control"]["accuracy"] for x in layers],
            layers[0]["chance"],
        ),
    ]
    return plot_probe([x["layer"] for x in layers], panels, path)


def write_probe(result: dict[str, Any], folder: str | Path) -> Path:
    """probe.md, probe.json and probe.png of a `probe_run` result into `folder`; returns the folder."""
    folder = Path(folder)
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
        figure = draw_probe(result, folder / PROBE_FILES["figure"])
        blocks = [Heading(f"Position probe: {result.get('run', 'model')}", 1), *probe_blocks(result, figure)]
        write_atomic(folder / PROBE_FILES["markdown"], render_markdown(blocks, folder).encode("utf-8"))
        write_atomic(folder / PROBE_FILES["json"], (json.dumps(to_json(result, 6)) + "\n").encode("utf-8"))
    return folder


def report_probe_blocks(result: dict[str, Any] | None, folder: Path) -> list[Block]:
    """For `octlm inspect`: the probe section, its files written into `folder/probe/`; [] without a probe."""
    if result is None:
        return []
    if "skipped" in result:
        return probe_blocks(result, None)
    write_probe(result, folder / PROBE_DIR)
    return probe_blocks(result, folder / PROBE_DIR / PROBE_FILES["figure"])
