#!/usr/bin/env bash
# The live benchmark on a GPU machine: CUDA provider, fp16 compute-equivalent inswapper stand-in,
# 1080p @ 30 fps, SCRFD-2.5G. Prints one table (stdout); the log goes to $OUT/bench.log.
#
#   benchmarks/gpu.sh [more `vcamd bench` options]      # from anywhere
#   PYTHON=/path/to/python OUT=/some/dir benchmarks/gpu.sh
#
# Needs: an NVIDIA GPU + driver, and a Python with this repo's dependencies and `onnxruntime-gpu`
# (not the CPU `onnxruntime` beside it). Budget: < 5 min — two scenarios × 600 frames (20 s each
# at 30 fps), the ~280 MB fp16 stand-in built at run time (~20 s), CUDA session setup (~30 s).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ASSETS="${VCAMD_ASSETS:-$REPO/../shared/assets}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"

for f in "$ASSETS/images/newton.png" "$ASSETS/models/scrfd_2.5g_kps.onnx"; do
  [[ -f "$f" ]] || { echo "gpu.sh: missing $f — set VCAMD_ASSETS to the shared assets folder" >&2; exit 2; }
done

# 1. A GPU, and ONNX Runtime's CUDA provider: say exactly what is missing.
if ! GPU="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1)"; then
  echo "gpu.sh: nvidia-smi failed — no NVIDIA GPU or driver on this machine" >&2
  exit 2
fi
"$PYTHON" - <<'PY' || exit 2
import sys
try:
    import onnxruntime as ort
except ImportError:
    sys.exit("gpu.sh: onnxruntime is not installed — pip install onnxruntime-gpu")
if hasattr(ort, "preload_dlls"):
    try:
        ort.preload_dlls()  # CUDA/cuDNN from the nvidia-* pip wheels, when that is how they came
    except Exception:
        pass
if "CUDAExecutionProvider" not in ort.get_available_providers():
    sys.exit(f"gpu.sh: onnxruntime {ort.__version__} has no CUDA provider (has {ort.get_available_providers()}) — "
             "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu")
PY

# 2. The benchmark: the same code as `vcamd bench` on the CPU, scaled up.
cd "$REPO"
set +e
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" timeout 280 "$PYTHON" -m vcamd bench \
  --resolution 1080p --fps 30 --frames 600 --scenarios light,inswapper \
  --providers cuda --fp16 --threads 4 \
  --face "$ASSETS/images/newton.png" --detector "$ASSETS/models/scrfd_2.5g_kps.onnx" \
  --json "$OUT/gpu_bench.json" "$@" 2>"$OUT/bench.log"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  echo "gpu.sh: vcamd bench failed (exit $rc; 124 = over the 280 s limit); last log lines:" >&2
  tail -n 25 "$OUT/bench.log" >&2
  exit $rc
fi

# 3. Say so loudly if any model fell back to the CPU (the table would silently be a CPU number).
"$PYTHON" - "$OUT/gpu_bench.json" "$GPU" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for name, result in doc["results"].items():
    used = result["stats"]["providers"]
    cpu = [model for model, provider in used.items() if provider != "CUDAExecutionProvider"]
    if cpu:
        print(f"WARNING: {name}: not on CUDA: {', '.join(f'{m} ({used[m]})' for m in cpu)}")
print(f"GPU: {sys.argv[2]}; JSON: {sys.argv[1]}")
PY
