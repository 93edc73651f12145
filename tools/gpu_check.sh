#!/usr/bin/env bash
# The CUDA kernels' checks on a GPU machine that has PyTorch, nvcc and no MindSpore: builds
# the CPU and CUDA libraries in place, runs the CUDA tests (tests/gpu, against the reference
# and the CPU library), the benchmarks (benchmarks/cuda_kernels.py), and compute-sanitizer's
# memcheck and racecheck on small cases.  Logs and figures go to the folder $1 (default:
# gpu_results); the exit status is 1 when any step failed.  Run from the repository root:
#   bash tools/gpu_check.sh [OUT]
set -uo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "gpu_check.sh: unknown option $1 (the one argument is the output folder)" >&2; exit 2 ;;
esac
out=${1:-gpu_results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 MSOPT_CUDA=1 MSOPT_CUDA_ARCHS=${MSOPT_CUDA_ARCHS:-90}
pytest_gpu=(python3 -m pytest --noconftest -o addopts= -p no:cacheprovider tests/gpu)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__)"; } > "$out/device.txt" 2>&1
cat "$out/device.txt"
start=$SECONDS
python3 setup.py -q build_ext --inplace > "$out/build.log" 2>&1 \
  || { tail -40 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - start)) s"
start=$SECONDS
failed=()
"${pytest_gpu[@]}" -q -rfEs --junitxml "$out/tests.xml" > "$out/tests.log" 2>&1 || failed+=(tests)
echo "tests: $((SECONDS - start)) s"; tail -25 "$out/tests.log"
start=$SECONDS
timeout 200 python3 -m benchmarks.cuda_kernels --profile --json "$out/bench.json" \
  > "$out/bench.log" 2>&1 || failed+=(bench)
echo "bench: $((SECONDS - start)) s"; cat "$out/bench.log"
start=$SECONDS
small="many_tensors or propose or (take and 3) or (apply_sums and float16 and True)"
small="$small or refus or (lamb and n16385_1) or every_path"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "${pytest_gpu[@]}" -q -x -k "$small" > "$out/memcheck.log" 2>&1 || failed+=(memcheck)
echo "memcheck: $((SECONDS - start)) s"; tail -6 "$out/memcheck.log"
start=$SECONDS
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 \
  "${pytest_gpu[@]}" -q -x -k "(select_many_tensors_in_one_call and ties) or every_path" \
  > "$out/racecheck.log" 2>&1 || failed+=(racecheck)
echo "racecheck: $((SECONDS - start)) s"; tail -6 "$out/racecheck.log"
if [ ${#failed[@]} -gt 0 ]; then echo "failed: ${failed[*]}"; exit 1; fi
echo "all passed"
