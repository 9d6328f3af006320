"""The table `octlm inspect`'s report shows for a scheme without position vectors: RoPE's frequencies, ALiBi's
slopes, T5's buckets, and for any other registered scheme what its class `shows` (octlm/inspect/analysis.py)."""

from __future__ import annotations

from typing import Any

from octlm.inspect.render import Block, Paragraph, Table


def instead_blocks(pos: dict[str, Any]) -> list[Block]:
    """The table a scheme without position vectors shows instead."""
    distances = pos["distances"]
    if "rope" in pos:
        r = pos["rope"]
        rows = [
            [str(i), f"{t:.6g}", f"{w:,.1f}", f"{n:.3g}"]
            for i, (t, w, n) in enumerate(
                zip(r["theta"], r["wavelength"], r["turns_in_context"], strict=True)
            )
        ]
        return [Table(["pair i", "θ_i (radians per position)", "wavelength 2π/θ_i", "turns within T"], rows)]
    if "frequencies" in pos:
        f = pos["frequencies"]
        rows = [
            [str(i), f"{t:.6g}", f"{w:,.1f}" if t > 0 else "not rotated", f"{n:.3g}"]
            for i, (t, w, n) in enumerate(
                zip(f["theta"], f["wavelength"], f["turns_in_context"], strict=True)
            )
        ]
        return [Table(["pair i", "θ_i (radians per position)", "wavelength 2π/θ_i", "turns within T"], rows)]
    if "bias" in pos:
        at = pos["bias"]["bias_at_distance"]
        heads = len(next(iter(at.values())))
        rows = [[str(h)] + [f"{at[d][h]:+.3f}" for d in distances if d in at] for h in range(heads)]
        return [
            Paragraph(
                "Bias added to the score of the key d positions back from the last position, per head:"
            ),
            Table(["head"] + [f"d = {d}" for d in distances if d in at], rows),
        ]
    if "alibi" in pos:
        a = pos["alibi"]
        rows = [
            [str(h), f"{s:.6g}"] + [f"{-s * d:.3f}" for d in distances] for h, s in enumerate(a["slopes"])
        ]
        return [Table(["head", "slope"] + [f"d = {d}" for d in distances], rows)]
    if "t5" in pos:
        t5 = pos["t5"]
        heads = t5["bias"].shape[1]
        rows = [
            [str(b), f"{lo}–{hi}" if hi > lo else str(lo)]
            + [f"{t5['bias'][b, h]:+.3f}" for h in range(heads)]
            for b, (lo, hi) in t5["bucket_distances"].items()
        ]
        return [
            Paragraph(
                "Learned bias per bucket (the distances each bucket covers within the context) and head:"
            ),
            Table(["bucket", "distances"] + [f"head {h}" for h in range(heads)], rows),
        ]
    return []
