#!/usr/bin/env bash
# Digits training on 2 workers under msrun: DGCMomentum against dense data-parallel Momentum.
#   bash examples/msrun_train.sh [OUT]      (default OUT: results/msrun)
# Needs the package installed (see README); uses the python (and msrun) on PATH.
# msrun runs examples/train_dist.py as a script: the repository root goes on PYTHONPATH so that
# its imports of examples.common find the package.
set -euo pipefail
usage() {
  cat <<'EOF_USAGE'
usage: bash examples/msrun_train.sh [-h|--help] [OUT]

Trains the digits MLP on $WORKERS workers (default 2) under msrun, once with
dense data-parallel Momentum and once with DGCMomentum, then compares them.
  OUT        output folder (default: results/msrun); must not start with '-'
  -h, --help show this help and exit
Environment: WORKERS (number of workers, default 2).
EOF_USAGE
}
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  -*) echo "msrun_train.sh: unknown option '$1' (OUT must not start with '-')" >&2
      usage >&2; exit 2 ;;
esac
if [ $# -gt 1 ]; then
  echo "msrun_train.sh: expected at most one argument (OUT), got $#" >&2; usage >&2; exit 2
fi
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${1:-results/msrun}
WORKERS=${WORKERS:-2}
mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 20000))
for opt in momentum dgc; do
  echo "== $opt, $WORKERS workers (logs in $OUT/log_$opt)"
  msrun --worker_num="$WORKERS" --local_worker_num="$WORKERS" --master_addr=127.0.0.1 \
        --master_port=$((PORT++)) --log_dir="$OUT/log_$opt" --join=True \
        examples/train_dist.py --opt "$opt" --out "$OUT" > "$OUT/msrun_$opt.txt" 2>&1 \
    || { tail -n 40 "$OUT/msrun_$opt.txt"; exit 1; }
  grep -h "epoch" "$OUT/log_$opt/worker_0.log"
done
python -m examples.train_dist --report "$OUT"
