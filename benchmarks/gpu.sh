#!/usr/bin/env bash
# The CUDA checks, in one go (estimated 4-6 minutes on an H200; each step has its own time limit, together
# 7 min 50 s):
#
#   1. the tests that touch the device on the GPU: tests/test_runtime_bf16.py (its CUDA tests skip without a GPU
#      and run here: fp32 logits and the KV cache on CUDA against the CPU, training in auto, bf16 and fp32 with
#      float32 checkpoints), tests/model/test_decoder.py (and _numpy), tests/training/test_loop.py,
#      tests/generation/test_generate.py (not slow ones);
#   2. the benchmark on CUDA: `bench.py --device cuda` (fp32 and bf16 matmul peaks; fp32 against bf16
#      training at configs a, b, c, interleaved) -> benchmarks/results/cuda-<gpu>.{json,md};
#   3. the main job on CUDA (day1, 6,000 steps) in bf16 (`--dtype auto` is bf16 autocast on CUDA) and in fp32,
#      validation bits per byte and tokens/s -> benchmarks/results/cuda-main-{bf16,fp32}.txt.
#
# Usage: bash benchmarks/gpu.sh [PYTHON]   (default .venv/bin/python: torch with CUDA, the dev extras)
# Every figure is written under benchmarks/results/ and, when $OUT is set (the device runner), copied there.
# Until this has run on a GPU, the CUDA path is untested (benchmarks/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
RESULTS=benchmarks/results
mkdir -p "$RESULTS"
LOG=$RESULTS/cuda-gpu-sh.log
status=0
step() {  # step SECONDS NAME COMMAND...: run it under a time limit, log it, remember a failure
    local limit=$1 name=$2
    shift 2
    echo "=== $name ($(date +%T), limit ${limit}s)" | tee -a "$LOG"
    local start=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc in $((SECONDS - start)) s" | tee -a "$LOG"
    [ "$rc" -eq 0 ] || status=1
}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu.sh: $PY has no CUDA (torch.cuda.is_available() is False); run it where a GPU and a CUDA torch are" >&2
    exit 2
fi
: >"$LOG"
"$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$LOG"
export OMP_NUM_THREADS=4 TOKENIZERS_PARALLELISM=false
step 120 "tests on CUDA" "$PY" -m pytest -x -q -m "not slow" -p no:cacheprovider \
    tests/test_runtime_bf16.py tests/model/test_decoder.py tests/model/test_decoder_numpy.py \
    tests/training/test_loop.py tests/generation/test_generate.py
step 90 "benchmark on CUDA" "$PY" benchmarks/bench.py --device cuda --out "$RESULTS"
RUNS=$(mktemp -d)
for dtype in bf16 fp32; do  # the first one also tokenizes the corpus (the data folder is not carried)
    limit=$([ "$dtype" = bf16 ] && echo 150 || echo 110)
    step "$limit" "main job on CUDA, $dtype" "$PY" -m octlm train --device cuda --dtype "$dtype" --overwrite \
        --out "$RUNS/main-$dtype" --no-progress --report false
    sed -n "/=== main job on CUDA, $dtype (/,/=== main job on CUDA, $dtype:/p" "$LOG" >"$RESULTS/cuda-main-$dtype.txt"
done
rm -rf "$RUNS"
if [ -n "${OUT:-}" ]; then
    cp "$RESULTS"/cuda-* "$OUT"/ 2>/dev/null || true
fi
echo "gpu.sh: done, exit $status; figures in $RESULTS/cuda-*" | tee -a "$LOG"
exit $status
