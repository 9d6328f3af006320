"""bf16: detecting the processor's support, the autocast context, bf16 logits against fp32, and the notice
`octlm train --dtype bf16` prints where the processor has no bf16 instructions."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

import pytest
import tiny
import torch

from octlm.commands import train as train_command
from octlm.config import ModelConfig, config_from_dict
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.runtime import BF16Support, autocast, bf16_support_from_flags, cpu_bf16_support

SAPPHIRE_RAPIDS = "fpu sse2 avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"
ZEN4 = "fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16 vaes"
SKYLAKE = "fpu sse2 avx2 avx512f avx512bw avx512vl"
NOTICE = "note: --dtype bf16 will be slower than fp32 here"
CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        (SAPPHIRE_RAPIDS, "AMX"),
        (ZEN4, "AVX512-BF16"),
        (SKYLAKE, "none"),
        ("", "none"),
        ("xavx512_bf16 amx_bf16x avx512_bf16_extra", "none"),
    ],  # whole flags only, never substrings
)
def test_bf16_support_from_flags(flags: str, kind: str) -> None:
    support = bf16_support_from_flags(flags, "AVX512")
    assert support.kind == kind
    assert support.native == (kind != "none")
    assert support.detail.endswith("torch CPU capability AVX512")


def test_cpu_bf16_support_reads_the_flags_line(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {ZEN4}\nbugs\t\t: amx_bf16\n")
    assert cpu_bf16_support(cpuinfo).kind == "AVX512-BF16"  # a flag on another line does not count
    cpuinfo.write_text("processor\t: 0\n")
    assert cpu_bf16_support(cpuinfo) == BF16Support(
        "none", f"{cpuinfo} lists no CPU flags, so nothing was detected"
    )
    missing = cpu_bf16_support(tmp_path / "absent")
    assert missing.kind == "none" and "is unreadable (No such file or directory)" in missing.detail


def test_cpu_bf16_support_on_this_machine() -> None:
    """What this machine's /proc/cpuinfo says, read here independently with a regular expression."""
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        pytest.skip("no /proc/cpuinfo (not Linux)")
    flags = re.search(r"^flags\s*:(.*)$", path.read_text(), re.MULTILINE)
    if flags is None:
        pytest.skip("/proc/cpuinfo has no flags line (not x86)")
    words = flags.group(1).split()
    expected = "AMX" if "amx_bf16" in words else "AVX512-BF16" if "avx512_bf16" in words else "none"
    assert cpu_bf16_support().kind == expected


def test_autocast_follows_train_dtype() -> None:
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)
    expected_dtypes = {
        "bf16": torch.bfloat16,
        "bf16-autocast": torch.bfloat16,
        "fp32": torch.float32,
        "auto": torch.float32,
    }
    for dtype, expected in expected_dtypes.items():
        with autocast(CPU, dtype):
            assert layer(x).dtype == expected, dtype
    assert layer.weight.dtype == torch.float32  # autocast casts copies; the weights stay float32
    with pytest.raises(UserError, match="train.dtype = 'fp16' is unknown"):
        autocast(CPU, "fp16")


def test_train_dtype_is_checked_and_auto_keeps_old_hashes() -> None:
    with pytest.raises(UserError) as caught:
        config_from_dict({"train": {"dtype": "fp16"}})
    assert str(caught.value) == (
        "config 'custom' has 1 problem(s): train.dtype = 'fp16' is unknown; choose one of auto, fp32, bf16, "
        "bf16-autocast; did you mean bf16?"
    )
    # `auto`, the default, leaves the hash as it was before the field existed (checkpoints record it) ...
    auto = config_from_dict({})
    d = auto.to_dict()
    for key in ("out_dir", "run_name", "device", "compile", "report", "sample_tokens", "log", "dtype"):
        d["train"].pop(key)
    d["train"].pop("init_from")  # fields added later still, left out at their defaults too
    for key in ("rope_scaling", "rope_factor", "rope_original_length"):
        d["model"].pop(key)
    assert auto.hash() == hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()
    # ... and any other dtype changes it, since it changes the trained weights.
    hashes = {
        config_from_dict({"train": {"dtype": dt}}).hash() for dt in ("auto", "fp32", "bf16", "bf16-autocast")
    }
    assert len(hashes) == 4


@pytest.mark.parametrize("position", ["learned", "rope", "alibi"])
def test_bf16_logits_close_to_fp32(position: str) -> None:
    """A random 2-layer model (C 64, V 512, T 64): bf16 autocast logits against fp32. bf16 keeps 8 bits of
    mantissa (relative rounding 2^-9 = 0.002 per matmul input); measured max |error| 0.0030 (learned), 0.0043
    (rope), 0.0045 (alibi) on logits whose std is 0.162-0.164, i.e. 1.9-2.8% of it; the tolerance is 4%."""
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=512, d_model=64, n_layers=2, n_heads=4, d_ff=256, context_length=64, position=position
    )
    model = Decoder(config).eval()
    ids = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference, _ = model(ids)
        with autocast(CPU, "bf16"):
            low, _ = model(ids)
    assert low.dtype == torch.bfloat16
    error = (low.float() - reference).abs().max().item()
    assert 0 < error < 0.04 * reference.std().item()  # > 0: bf16 really ran


# ------------------------------------------------------------------------------------------------------------
# The notice


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.write_corpus(tmp_path_factory.mktemp("corpus") / "text")


def train_args(root: Path, corpus: Path, dtype: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    train_command.add_arguments(parser)
    flags = tiny.tiny_flags(root, corpus, steps=4, eval_interval=4, checkpoint_interval=4, dtype=dtype)
    return parser.parse_args([*flags, "--no-progress"])


@pytest.mark.parametrize(
    ("dtype", "support", "notices"),
    [
        ("bf16", BF16Support("none", "fake: no flags"), 1),
        ("bf16", BF16Support("AVX512-BF16", "fake"), 0),
        ("fp32", BF16Support("none", "fake: no flags"), 0),
    ],
)
def test_train_says_once_that_bf16_is_slow_without_native_support(
    tmp_path: Path,
    corpus: Path,
    capsys: pytest.CaptureFixture[str],
    dtype: str,
    support: BF16Support,
    notices: int,
) -> None:
    assert train_command.run(train_args(tmp_path, corpus, dtype), bf16=support) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if NOTICE in line]
    assert len(lines) == notices, err
    if notices:
        assert lines[0] == (
            f"{NOTICE}: this CPU has no native bf16 (fake: no flags), so every bf16 matmul is converted to fp32 "
            "and back; use --dtype fp32 unless you are testing bf16"
        )


# ------------------------------------------------------------------------------------------------------------
# CUDA: these run wherever a GPU is present (benchmarks/gpu.sh); they have not run yet (no GPU in the sessions
# so far), so their tolerances are estimates to tighten with the first measured error.

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


@needs_cuda
@pytest.mark.parametrize("position", ["learned", "rope", "alibi", "t5"])
def test_cuda_logits_and_cache_match_cpu(position: str) -> None:
    """fp32 on CUDA against fp32 on CPU (tolerance 1e-4: different kernels sum in other orders), and the KV
    cache on CUDA against a full pass there."""
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=512, d_model=64, n_layers=2, n_heads=4, d_ff=256, context_length=64, position=position
    )
    model = Decoder(config).eval()
    ids = torch.randint(0, 512, (2, 48), generator=torch.Generator().manual_seed(1))
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here
    with torch.no_grad():
        reference, _ = model(ids)
        gpu = model.to("cuda")
        full, _ = gpu(ids.cuda())
        cache = gpu.new_cache(2)
        steps = [gpu(ids[:, :40].cuda(), cache=cache)[0]]
        steps += [gpu(ids[:, t : t + 1].cuda(), cache=cache)[0] for t in range(40, 48)]
    assert (full.cpu() - reference).abs().max().item() < 1e-4
    assert (torch.cat(steps, 1) - full).abs().max().item() < 1e-4


@needs_cuda
@pytest.mark.parametrize("dtype", ["auto", "bf16", "bf16-autocast", "fp32"])
def test_cuda_training_learns_and_keeps_fp32_checkpoints(tmp_path: Path, corpus: Path, dtype: str) -> None:
    from safetensors.torch import load_file

    from octlm.training.loop import train

    raw = tiny.tiny_raw(tmp_path, corpus, steps=30, dtype=dtype, device="cuda")
    result = train(config_from_dict(raw, name="tiny"), progress=False)
    assert sum(result.train_losses[-5:]) / 5 < result.train_losses[0] - 1.0
    saved = load_file(str(result.run_dir / "checkpoint" / "model.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.float32}


# ------------------------------------------------------------------------------------------------------------
# The benchmark's bf16 figures


def test_benchmark_reports_bf16_support_peaks_and_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The peak and precision sections on a tiny shape: both peaks, every mode's ratio to fp32, the table."""
    pytest.importorskip("transformers")  # benchmarks/measure.py builds HF models too
    monkeypatch.syspath_prepend(str(tiny.ROOT / "benchmarks"))
    import measure
    import measure_train
    import render

    monkeypatch.setitem(
        measure.CONFIGS,
        "tiny",
        dict(vocab_size=300, d_model=32, n_layers=1, n_heads=2, context_length=16, batch=2),
    )
    peak = measure.bench_peak([64], 1)
    assert peak["peak_gflops"] > 0 and peak["bf16"]["peak_gflops"] > 0
    assert peak["bf16_over_fp32"] == peak["bf16"]["peak_gflops"] / peak["peak_gflops"]
    precision = {"tiny": measure_train.bench_precision("tiny", 0, 1, lambda msg: None)}
    rows = precision["tiny"]["rows"]
    assert list(rows) == ["fp32", "bf16 (bf16 weights, fp32 masters)", "bf16-autocast"]
    assert rows["fp32"]["over_fp32"] == 1.0 and all(row["over_fp32"] > 0 for row in rows.values())
    md = "\n".join(render.peak_section(peak) + render.precision_section(precision))
    assert "bf16 peak: **" in md and "| bf16-autocast |" in md
    assert measure.machine()["bf16_support"] == cpu_bf16_support().kind
