"""The Markdown report of one benchmark run: one function per section, joined by `markdown`.

Every function takes the run's results (as `bench.run_benchmarks` builds them and writes them to JSON) and
returns its lines; nothing here measures.
"""

from __future__ import annotations

from typing import Any

from measure import CONFIGS, MFU_FORMULA, summary
from measure_decode import (
    CLI_BATCH,
    CLI_GREEDY,
    CLI_SAMPLED,
    FLOOR_1,
    FLOOR_DENSE_1,
    HF_BATCH,
    HF_GREEDY,
    HF_SAMPLED,
)


def fmt_range(values: list[float], digits: int = 0) -> str:
    s = summary(values)
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}–{s['max']:,.{digits}f})"


def header(r: dict[str, Any]) -> list[str]:
    m = r["machine"]
    lines = [f"# octlm benchmarks — {m['device']}{' (quick)' if r['quick'] else ''}", ""]
    lines += [
        f"- CPU: {m['cpu']} ({m['cpu_capability']}), {m['cores']} cores, torch {m['torch']}, "
        f"{m['threads']} threads, denormals flushed: {m['flush_denormal']}, Python {m['python']}; load average (1/5/15 min) at start "
        f"{m['load_average_at_start']}, at end {m.get('load_average_at_end')}",
        f"- bf16 support: **{m.get('bf16_support', 'n/a')}** ({m.get('bf16_detected', 'not recorded')})"
        + (f"; GPU: {m['gpu']}" if "gpu" in m else ""),
        f"- Run: {r['started']}, {r['wall_s']:.0f} s in all; timings are median (min–max) over "
        f"{r['reps']} repetitions after {r['warmup']} warm-up, models interleaved round by round",
        "",
    ]
    return lines


def peak_section(p: dict[str, Any]) -> list[str]:
    lines = ["## Matmul peak (square matmul, fp32 and bf16 interleaved)", ""]
    lines += ["| n | fp32 GFLOP/s | bf16 GFLOP/s |", "|---|---|---|"]
    bf16 = p.get("bf16", {}).get("gflops_by_size", {})
    for n, s in p["gflops_by_size"].items():
        b = bf16.get(n)
        low = f"{b['median']:.0f} ({b['min']:.0f}–{b['max']:.0f})" if b else "n/a"
        lines.append(f"| {n} | {s['median']:.0f} ({s['min']:.0f}–{s['max']:.0f}) | {low} |")
    lines += [
        "",
        f"Peak used for MFU: **{p['peak_gflops']:.0f} GFLOP/s** (fp32, n = {p['best_size']}, median).",
    ]
    if "bf16" in p:
        lines.append(
            f"bf16 peak: **{p['bf16']['peak_gflops']:.0f} GFLOP/s** (n = {p['bf16']['best_size']}), "
            f"{p['bf16_over_fp32']:.2f}× the fp32 peak in the same rounds."
        )
    return [*lines, ""]


def precision_section(precision: dict[str, Any] | None) -> list[str]:
    """fp32 against the two bf16 modes, octlm learned, with the matmul probes of the same rounds."""
    lines = []
    for name, pr in (precision or {}).items():
        c, pg = CONFIGS[name], pr["probe_gflops"]
        lines += [
            f"## fp32 against bf16 training (octlm learned, config {name}: V {c['vocab_size']:,}, "
            f"C {c['d_model']}, {c['n_layers']} layers, T {c['context_length']}, batch {c['batch']})",
            "",
            f"matmul probes (n 1024) in these rounds: fp32 {pg['fp32']['median']:.0f}, bf16 "
            f"{pg['bf16']['median']:.0f} GFLOP/s ({pg['bf16']['median'] / pg['fp32']['median']:.2f}×)",
            "",
            "| mode | tokens/s | over fp32 (medians of the same rounds) |",
            "|---|---|---|",
        ]
        for mode, row in pr["rows"].items():
            t = row["tokens_per_s"]
            lines.append(
                f"| {mode} | {t['median']:,.0f} ({t['min']:,.0f}–{t['max']:,.0f}) | {row['over_fp32']:.2f}× |"
            )
        lines.append("")
    return lines


def ratio(rows: dict[str, Any], k: str, ref: str) -> str:
    """Row `k`'s tokens/s over row `ref`'s: medians, and best against best."""
    a, b = rows[k]["tokens_per_s"], rows[ref]["tokens_per_s"]
    return f"{a['median'] / b['median']:.2f}× (best {a['max'] / b['max']:.2f}×)"


def training_row(rows: dict[str, Any], k: str, peak: float) -> str:
    """One model's line: tokens/s, MFU, against its HF counterpart, and its cost over octlm learned."""
    row = rows[k]
    tps = row["tokens_per_s"]["median"]
    mfu = tps * row["flops_per_token"] / 1e9 / peak
    vs = {
        "octlm learned": "GPT-2 " + ratio(rows, k, "HF GPT2LMHeadModel"),
        "octlm rope llama-shaped": "Llama " + ratio(rows, k, "HF LlamaForCausalLM"),
        "octlm rope": "Llama " + ratio(rows, k, "HF LlamaForCausalLM") + ", shapes differ",
    }.get(k, "")
    cost = ""
    if k.startswith("octlm") and "llama" not in k:
        cost = f"{rows['octlm learned']['tokens_per_s']['median'] / tps - 1:+.0%}"
    return f"| {k} | {fmt_range(row['samples'])} | {mfu:.0%} | {vs} | {cost} |"


def training_config(name: str, t: dict[str, Any], peak: float) -> list[str]:
    c = CONFIGS[name]
    rows = t["rows"]
    pp = t["peak_probe_gflops"]
    lines = [
        f"### Config {name}: V {c['vocab_size']:,}, C {c['d_model']}, {c['n_layers']} layers, "
        f"{c['n_heads']} heads, T {c['context_length']}, batch {c['batch']}",
        "",
        f"matmul probe (n 1024) during these rounds: {pp['median']:.0f} "
        f"({pp['min']:.0f}–{pp['max']:.0f}) "
        "GFLOP/s",
        "",
        "| model | tokens/s | MFU (median) | octlm / HF, matching scheme | time cost over learned |",
        "|---|---|---|---|---|",
    ]
    lines += [training_row(rows, k, peak) for k in rows]
    lines.append("")
    return lines


def training_section(training: dict[str, Any], peak: float) -> list[str]:
    lines = ["## Training tokens/s (AdamW fused, fp32, dropout 0, tied head)", "", MFU_FORMULA, ""]
    for name, t in training.items():
        lines += training_config(name, t, peak)
    return lines


def compile_section(compiled: dict[str, Any] | None) -> list[str]:
    if not compiled:
        return []
    lines = [
        "## torch.compile (mode default), learned scheme",
        "",
        "| config | first step (compile) s | eager tokens/s | compiled tokens/s |",
        "|---|---|---|---|",
    ]
    for name, cpl in compiled.items():
        if "error" in cpl:
            lines.append(f"| {name} | failed: {cpl['error']} | | |")
        else:
            e, cc = cpl["eager_tokens_per_s"], cpl["compiled_tokens_per_s"]
            lines.append(
                f"| {name} | {cpl['compile_first_step_s']:.1f} | {e['median']:,.0f} "
                f"({e['min']:,.0f}–{e['max']:,.0f}) | {cc['median']:,.0f} "
                f"({cc['min']:,.0f}–{cc['max']:,.0f}) |"
            )
    lines.append("")
    return lines


def context_section(ctx: dict[str, Any]) -> list[str]:
    c = CONFIGS[ctx["config"]]
    lines = [
        f"## Forward latency and peak memory vs context length (config {ctx['config']} shape: "
        f"C {c['d_model']}, "
        f"{c['n_layers']} layers, learned table {c['context_length']} rows; batch 1, inference mode)",
        "",
        ctx["memory_method"],
        "",
        "| scheme | length | latency ms | peak memory MiB |",
        "|---|---|---|---|",
    ]
    for row in ctx["rows"]:
        if row.get("no_rows"):
            lines.append(f"| {row['scheme']} | {row['length']:,} | no rows | no rows |")
            continue
        lat = row["latency_ms"]
        mem = row["peak_memory_bytes"]
        mem_s = f"{mem / 2**20:.1f}" if mem is not None else "n/a"
        lines.append(
            f"| {row['scheme']} | {row['length']:,} | {lat['median']:.2f} ({lat['min']:.2f}–{lat['max']:.2f})"
            f" | {mem_s} |"
        )
    lines.append("")
    return lines


def long_section(lg: dict[str, Any] | None) -> list[str]:
    """Bias schemes at long contexts: peak memory and latency, bias built whole (before) or per query chunk."""
    if not lg:
        return []
    c = CONFIGS[lg["config"]]
    ch = lg["chunk"]
    lines = [
        f"## Long contexts: bias whole (before) vs per query chunk (after) (config {lg['config']} shape: "
        f"C {c['d_model']}, {c['n_layers']} layers, {c['n_heads']} heads; batch 1, inference mode)",
        "",
        f"Chunked past {ch['whole_bias_pairs']:,} query-key pairs, {ch['chunk_bias_entries']:,} bias entries "
        "per chunk. " + lg["memory_method"] + " One fresh process per point; the forward time is that one "
        "measured pass.",
        "",
        "| scheme | length | path | peak memory MiB | × NoPE | forward s |",
        "|---|---|---|---|---|---|",
    ]
    nope = {r["length"]: r.get("bytes") for r in lg["memory"] if r["scheme"] == "nope"}
    for r in lg["memory"]:
        b, ref = r.get("bytes"), nope.get(r["length"])
        mem = f"{b / 2**20:,.1f}" if b is not None else r.get("error", "n/a")
        times = f"{ref and b / ref:.2f}×" if b is not None and ref else ""
        secs = f"{r['seconds']:.2f}" if r.get("seconds") is not None else ""
        lines.append(f"| {r['scheme']} | {r['length']:,} | {r['path']} | {mem} | {times} | {secs} |")
    lines += [
        "",
        "| scheme | length | before ms | after ms | after / before (medians, same rounds) |",
        "|---|---|---|---|---|",
    ]
    for r in lg["time"]:
        ms = {
            k: f"{v['median']:,.1f} ({v['min']:,.1f}–{v['max']:,.1f})"
            for k, v in r.items()
            if k.endswith("_ms")
        }
        ratio_s = f"{r['after_over_before']:.2f}×" if "after_over_before" in r else ""
        lines.append(
            f"| {r['scheme']} | {r['length']:,} | {ms.get('before_ms', '')} | {ms['after_ms']} | {ratio_s} |"
        )
    lines.append("")
    return lines


def generation_reference(g: dict[str, Any], k: str) -> float:
    """The HF `generate` with cache that row `k` is compared with: same architecture, same threads."""
    if k.endswith("1 thread"):
        return g["rows"]["HF GPT-2 generate, cache, 1 thread"]["tokens_per_s"]["median"]
    hf = "HF Llama generate, cache" if ("rope" in k or "Llama" in k) else "HF GPT-2 generate, cache"
    return g["rows"][hf]["tokens_per_s"]["median"]


def generation_section(g: dict[str, Any]) -> list[str]:
    lines = [
        f"## Generation (config {g['config']}, batch 1, greedy, prompt {g['prompt']}, {g['new_tokens']} new "
        "tokens, random weights)",
        "",
        "| path | new tokens/s | vs HF generate with cache, same threads |",
        "|---|---|---|",
    ]
    for k, row in g["rows"].items():
        if k in g.get("cli_rows", ()):
            continue  # their own table, below
        s = row["tokens_per_s"]
        ref = generation_reference(g, k)
        lines.append(
            f"| {k} | {s['median']:,.0f} ({s['min']:,.0f}–{s['max']:,.0f}) | {s['median'] / ref:.2f}× |"
        )
    lines += [
        "",
        f"The floor row runs only the {g['weight_megabytes_per_token']:.1f} MB of weight matrix-vector products "
        "that every cached decoding step must do (each `nn.Linear` of octlm's learned model, tied head "
        "included, on one token), and nothing else: the most tokens/s fp32 decoding through torch's GEMV "
        "can reach on this machine.",
        "",
    ]
    return lines + cli_section(g) if "cli_rows" in g else lines


CLI_PAIRS = {CLI_GREEDY: HF_GREEDY, CLI_SAMPLED: HF_SAMPLED, CLI_BATCH: HF_BATCH}  # octlm row: its HF row


def cli_section(g: dict[str, Any]) -> list[str]:
    """`octlm generate` itself (lean step, sampling, text streamed to /dev/null) against the floor and HF."""
    rows = g["rows"]
    med = {k: rows[k]["tokens_per_s"]["median"] for k in g["cli_rows"]}
    lines = [
        f'### `octlm generate` (config {g["config"]}, 1 thread, its default; prompt "class", {g["new_tokens"]} '
        "new tokens, `--keep-going`)",
        "",
        "| path | new tokens/s | % of the `nn.Linear` floor | % of the [in, out] floor | vs HF generate with "
        "cache, same sampling |",
        "|---|---|---|---|---|",
    ]
    for k in g["cli_rows"]:
        s = rows[k]["tokens_per_s"]
        hf = CLI_PAIRS.get(k)
        versus = f"{med[k] / med[hf]:.2f}×" if hf else ""
        shares = [
            "" if k in (CLI_BATCH, HF_BATCH) else f"{100 * med[k] / med[f]:.0f}%"
            for f in (FLOOR_1, FLOOR_DENSE_1)
        ]
        lines.append(
            f"| {k} | {s['median']:,.0f} ({s['min']:,.0f}–{s['max']:,.0f}) | {' | '.join(shares)} | {versus} |"
        )
    lines += [
        "",
        f"The CLI rows run what `octlm generate --keep-going` runs once the run is loaded (prompt, decoding, "
        f"every text piece written and flushed to /dev/null); batched rows count the tokens of all "
        f"{g.get('batch', 8)} samples. Ratios are of medians from the same interleaved rounds. The two floors "
        "are the same weight GEMVs: through each `nn.Linear`, and in the lean step's own layout (weights "
        "transposed to [in, out], bias in the same `addmm`), which torch's CPU GEMV reads faster at batch 1.",
        "",
    ]
    return lines


def embedding_section(e: dict[str, Any]) -> list[str]:
    lines = [
        f"## Embedding and position tables (forward, shape B×T×V×C = {'×'.join(map(str, e['shape']))})",
        "",
        "| operation | ms |",
        "|---|---|",
    ]
    for k, row in e["rows"].items():
        s = row["ms"]
        lines.append(f"| {k} | {s['median']:.3f} ({s['min']:.3f}–{s['max']:.3f}) |")
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {v:.1f}× |" for k, v in e["ratios"].items()]
    lines.append("")
    return lines


def tokenizer_section(tk: dict[str, Any]) -> list[str]:
    lines = [
        f"## Tokenizer ({tk['implementation']}, {tk['documents']} stdlib documents, "
        f"{tk['megabytes']:.1f} MB)",
        "",
        "| vocab | training s | encode MB/s (one call per document) | encode_batch MB/s |",
        "|---|---|---|---|",
    ]
    for vocab, row in tk["rows"].items():
        a, b, cc = row["train_s"], row["encode_mb_s"], row["encode_batch_mb_s"]
        lines.append(
            f"| {int(vocab):,} | {a['median']:.2f} ({a['min']:.2f}–{a['max']:.2f}) | {b['median']:.1f} "
            f"({b['min']:.1f}–{b['max']:.1f}) | {cc['median']:.1f} ({cc['min']:.1f}–{cc['max']:.1f}) |"
        )
    lines.append("")
    return lines


def task_cells_section(tc: dict[str, Any] | None) -> list[str]:
    """A battery cell's training steps/s (`octlm experiment tasks`), against HF GPT-2 on the same batches."""
    if not tc:
        return []
    first = next(iter(tc.values()))
    m = first["model"]
    lines = [
        f"## Task battery cell (`octlm experiment tasks`: learned positions, C {m['d_model']}, {m['n_layers']} "
        f"layers, {m['n_heads']} heads, d_ff {m['d_ff']}, batch {first['batch']}, answer-masked loss, "
        "1 thread per cell as the battery's workers run)",
        "",
        "| task | mean T | octlm steps/s | octlm drawing its batches | HF GPT2LMHeadModel | octlm / HF | "
        f"a {first['cell_steps']}-step cell |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, row in tc.items():
        sps = row["steps_per_s"]
        o, drawn, hf = sps["octlm"], sps["octlm, drawing its batches"], sps["HF GPT2LMHeadModel"]
        lines.append(
            f"| {task} | {row['mean_tokens'] / row['batch']:.0f} | {o['median']:.1f} ({o['min']:.1f}–{o['max']:.1f}) "
            f"| {drawn['median']:.1f} | {hf['median']:.1f} ({hf['min']:.1f}–{hf['max']:.1f}) "
            f"| {o['median'] / hf['median']:.2f}× (best {o['max'] / hf['max']:.2f}×) "
            f"| {row['cell_steps'] / drawn['median']:.0f} s |"
        )
    lines.append("")
    return lines


def threads_section(th: dict[str, Any] | None) -> list[str]:
    """`octlm train` tokens/s at octlm's default thread count, one thread and torch's choice, quiet and busy."""
    if not th:
        return []
    lines = [
        f"## Threads (`octlm train`, Day 1 model, {th['steps']} steps per run, a fresh process each)",
        "",
        "| machine | threads | used | tokens/s | against octlm's default |",
        "|---|---|---|---|---|",
    ]
    for condition in ("quiet", "one competing process"):
        rows = th[condition]
        default = rows["octlm default"]["median"]
        for name, row in rows.items():
            used = "/".join(str(n) for n in sorted(set(row["threads"])))
            lines.append(
                f"| {condition} | {name} | {used} | {row['median']:,.0f} ({row['min']:,.0f}–{row['max']:,.0f}) "
                f"| {row['median'] / default:.2f}× |"
            )
    lines.append("")
    return lines


def times_nope(value: float | None) -> str:
    """A ratio to the NoPE row, or "" where either side is unknown."""
    return f"{value:.2f}×" if value is not None else ""


def schemes_row(name: str, row: dict[str, Any]) -> str:
    """One row of `schemes_section`: training speed and its ratio, then the long forward's memory and time."""
    per_round = row.get("train_over_nope_per_round")
    spread = f" ({per_round['min']:.2f}–{per_round['max']:.2f})" if per_round else ""
    train = f"{fmt_range(row['samples'])} | {times_nope(row['train_over_nope'])}{spread}"
    if row.get("no_rows"):
        return f"| {name} | {train} | no rows | | no rows |"
    b, secs = row["peak_memory_bytes"], row["forward_s"]
    mem = f"{b / 2**20:,.1f}" if b is not None else row.get("error", "n/a")
    forward = f"{secs:.2f} ({times_nope(row['forward_over_nope'])})" if secs is not None else "n/a"
    return f"| {name} | {train} | {mem} | {times_nope(row['memory_over_nope'])} | {forward} |"


def schemes_section(sc: dict[str, Any] | None) -> list[str]:
    """Every row of the length experiment against NoPE: training tokens/s, and one long forward's peak memory."""
    if not sc:
        return []
    c, n = sc["shape"], f"{sc['length']:,}"
    lines = [
        f"## Position schemes against NoPE (the length experiment's shape: V {c['vocab_size']:,}, "
        f"C {c['d_model']}, {c['n_layers']} layers, {c['n_heads']} heads; {sc['threads']} thread)",
        "",
        f"Training: forward, loss, backward and a fused AdamW step at T {c['context_length']}, batch "
        f"{c['batch']}, every row interleaved round by round; × NoPE is the ratio of the medians (higher is "
        f"faster), with the range of the per-round ratios. Forward: one inference pass at {n} tokens, batch 1, "
        f"one fresh process per row. {sc['memory_method']} The forward time is that one measured pass.",
        "",
        f"| row | training tokens/s | × NoPE (per round) | peak memory MiB at {n} | × NoPE | forward s at {n} "
        "(× NoPE) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [schemes_row(name, row) for name, row in sc["rows"].items()]
    lines.append("")
    return lines


def markdown(r: dict[str, Any]) -> str:
    """The whole report: header, then every section in the order the run measures them."""
    lines = header(r)
    lines += peak_section(r["peak"])
    if "training" not in r:  # `bench.py --device cuda`: the peaks and the precision section only
        return "\n".join(lines + precision_section(r.get("precision")))
    lines += training_section(r["training"], r["peak"]["peak_gflops"])
    lines += precision_section(r.get("precision"))
    lines += compile_section(r.get("compile"))
    lines += context_section(r["context"])
    lines += long_section(r.get("long"))
    lines += generation_section(r["generation"])
    lines += embedding_section(r["embedding"])
    lines += tokenizer_section(r["tokenizer"])
    lines += task_cells_section(r.get("task_cells"))
    return "\n".join(lines)
