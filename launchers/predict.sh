#!/usr/bin/env bash
# Predictions made out of sample, measured against real training (as root: emulated hosts):
#   bash launchers/predict.sh                       # small_cnn and mobilenet_v2, ps and mirrored: about 2 h here (mobilenet_v2 alone
#                                                     at two rates: 80-82 min)
#   MODELS=small-cnn bash launchers/predict.sh      # small_cnn only: 6 rates, two passes over two calibration links: 23 min
# 1. calibration on unshaped links (the setup a user has): TF's runtime cost per closure and RPC (ps) or
#    collective (mirrored) from train runs of every model and strategy at the batch trained below, 2 workers
#    (CAL each: their spread is part of the uncertainty), over a sweep of those links (OUT/cal_sweep_none.jsonl).
#    At the batch trained: on these emulated hosts a step's cost beyond compute and the wire grows with the
#    batch (the ranks share 2 cores). Spread over the recipe, one before the rates at evenly spaced places
#    (CAL=3, 6 rates, 2 passes: before the 1st and 5th of the first pass, the 3rd of the second): this
#    machine's phases move TF's runtime by 2-4 ms for minutes at a time, so runs made back to back measure one
#    phase (docs/notes/predict-rounds.md has the rounds behind each choice). Each between two `train --compute-only` runs (OUT/cal_compute_*): a
#    worker computes slower inside training than alone
#    (the load, 1.02-1.08x here), and 2. measures the compute alone. Every
#    strategy is calibrated over slow links too (CAL_RATES, default 300mbit 1500mbit: one on each side of
#    where ps's transfers outlast about 4 ms): where they take that long, part of TF's runtime runs under
#    them, and below 1 Gbit/s the emulation's per-frame kernel cost adds to a step;
#    predict joins what each link's runs left into a curve over the wire's length
# 2. at every rate in RATES: a p2p sweep over the emulated links, then for every model and strategy a
#    `train --compute-only` (the compute step, W workers at once), a real train run, and another compute-only
#    run (predict pools them: a slow minute in one moves the time less far); REPEATS passes over the rates
#    (default 2: what a repeat moves is part of what is compared; a pass each, so the repeats of a rate are
#    minutes apart, not one phase of the machine) (plus W=3 for small_cnn at W3_RATE)
# 3. `commbench predict` for every rate, model and strategy from its sweep, the calibration and its compute
#    runs only: nothing from the runs it is compared with
# Every file goes to OUT (default predict-results/); predict rows to OUT/predict.jsonl.
# Knobs: MODELS, STRATEGIES, RATES, W3_RATE ("" for none), REPEATS, CAL (calibrations), MOBILENET_STEPS,
# QUICK=1 (the same recipe, less of it: small_cnn at 500mbit and unshaped, one calibration over unshaped and
# 300mbit links, 48-step runs, 1 repeat), TRANSPORT (the sweep's; default grpc-cpp where it is built, else grpc: TF talks C++ gRPC),
# PREDICT_SET (its emulated hosts' set, default prd: it makes and removes that set only, never yours).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "launchers/predict.sh: needs root (commbench hosts up); run it with sudo" >&2; exit 2; }
CB=${CB:-.venv/bin/commbench}
[ -x "$CB" ] || { echo "launchers/predict.sh: no $CB; run bash launchers/setup.sh --dev first" >&2; exit 2; }
OUT=${OUT:-predict-results}
if [ "${QUICK:-0}" = 1 ]; then  # the same recipe (calibrated apart, compute bracketed, out of sample), less of it
  MODELS=${MODELS:-small-cnn}; RATES=${RATES:-500mbit none}; W3_RATE=${W3_RATE-}; CAL_RATES=${CAL_RATES:-300mbit}
  STEPS=12; CAL=${CAL:-1}; SWEEP="-i 20 -x 2"
else
  STEPS=30; CAL=${CAL:-3}; SWEEP="-i 50 -x 5"
fi
MODELS=${MODELS:-small-cnn mobilenet_v2}
STRATEGIES=${STRATEGIES:-ps mirrored}
RATES=${RATES:-200mbit 500mbit 1gbit none}
W3_RATE=${W3_RATE-500mbit}
CAL_RATES=${CAL_RATES:-300mbit 1500mbit}
MOBILENET_STEPS=${MOBILENET_STEPS:-$(( STEPS / 3 ))}
REPEATS=${REPEATS:-$([ "${QUICK:-0}" = 1 ] && echo 1 || echo 2)}
mkdir -p "$OUT"
export COMMBENCH_HOSTS_SET=${PREDICT_SET:-prd}  # every hosts and --hosts call below: this set of its own
trap '$CB hosts down >/dev/null 2>&1 || true' EXIT
trap 'echo "launchers/predict.sh: line $LINENO failed (exit $?); the train runs'"'"' messages are in $OUT/train.log" >&2' ERR
step() { echo "== $*" >&2; }
hosts() { $CB hosts up 5 --rate "$1" >/dev/null; }

T=${TRANSPORT:-}
sweep() {  # sweep FILE -> OUT/FILE.jsonl over the transport TF's traffic is closest to
  if [ -z "$T" ]; then
    if $CB p2p-latency -t grpc-cpp --grpc-call unary --hosts 5 -m 8 -i 5 -x 1 >/dev/null 2>&1; then T=grpc-cpp; else T=grpc; fi
  fi
  # shellcheck disable=SC2086
  $CB p2p-latency -t "$T" --grpc-call unary --hosts 5 -m 8:1M $SWEEP -o "$OUT/$1.jsonl" >/dev/null
}
train() {  # train OUTFILE STRATEGY MODEL W BATCH STEPS
  local warm=$(( $6 / 4 > 2 ? $6 / 4 : 2 ))
  $CB train --hosts 5 --strategy "$2" --workers "$4" --ps 1 --model "$3" --batch "$5" --steps "$6" \
    --warmup-steps "$warm" -o "$1" 2>>"$OUT/train.log" | progress "$1"
}
progress() {  # the run's last table row, named by its file (its header is in the file's own `show`)
  tail -1 | sed "s|^ *|   $(basename "$1" .jsonl): |" >&2
}
# small_cnn: 240 steps (its communication at fast links is 7-10 ms of a 45 ms step: 60 steps measured it to
# +-17 %, too coarse to tell 15 %; 4x the steps halve that, for about 15 s a run); QUICK: 48, coarser.
# mobilenet_v2: 10 (4-8 s a step; MOBILENET_STEPS=30 measures its communication
# finely enough to compare it, for 3x the time). A compute-only run: as many steps, at most 60
SMALL_X=$([ "${QUICK:-0}" = 1 ] && echo 4 || echo 8)
model_steps() { if [ "$1" = small-cnn ]; then echo $(( STEPS * SMALL_X )); else echo "$MOBILENET_STEPS"; fi; }
model_batch() { if [ "$1" = small-cnn ]; then echo 64; else echo 32; fi; }
compute_only() {  # compute_only OUTFILE STRATEGY MODEL W: the compute step alone (mirrored's with its cluster
  # up and idle: it slows the workers' compute), as many steps as trained, at most 60
  # (half before, half after, at least 12 each)
  local n; n=$(model_steps "$3"); [ "$n" -le 60 ] || n=60
  $CB train --compute-only --strategy "$2" --hosts 5 --model "$3" --workers "$4" --batch "$(model_batch "$3")" \
    --steps "$n" -o "$1" 2>>"$OUT/train.log" | progress "$1"
}
measured() { [ "$3" = 2 ] || { [ "$1" = small-cnn ] && [ "$2" = "$W3_RATE" ]; }; }  # MODEL RATE W: trained here?

cal_run() {  # cal_run STRATEGY MODEL RATE: a calibration run, bracketed by compute-only runs (how much slower
  # a worker computes inside training than alone: the load)
  compute_only "$OUT/cal_compute_$1_none.jsonl" "$1" "$2" 2
  train "$OUT/cal_$1_$3.jsonl" "$1" "$2" 2 "$(model_batch "$2")" "$(model_steps "$2")"
  compute_only "$OUT/cal_compute_$1_none.jsonl" "$1" "$2" 2
}
calibrate() {  # the CAL calibration runs whose place is before the rate at index $1 of $2 (every model and strategy)
  local c
  for c in $(seq 0 $(( CAL - 1 ))); do
    [ $(( c * $2 / CAL )) = "$1" ] || continue
    step "1. calibration $(( c + 1 )) of $CAL, on unshaped links: every model and strategy at its batch"
    hosts none
    # its own file: the unshaped rate's sweep in 2. must not add to what calibrated
    [ -s "$OUT/cal_sweep_none.jsonl" ] || sweep cal_sweep_none
    for m in $MODELS; do for s in $STRATEGIES; do cal_run "$s" "$m" none; done; done
    # again over the slow links: how much of TF's runtime runs while the transfers are on the wire (and
    # what a slow emulated link adds)
    for r in $CAL_RATES; do
      hosts "$r"
      [ -s "$OUT/cal_sweep_$r.jsonl" ] || sweep "cal_sweep_$r"
      for m in $MODELS; do for s in $STRATEGIES; do cal_run "$s" "$m" "$r"; done; done
    done
  done
}

for r in none $CAL_RATES; do  # a calibration is this recipe's runs only
  rm -f "$OUT/cal_sweep_$r.jsonl"
  for s in $STRATEGIES; do rm -f "$OUT/cal_${s}_$r.jsonl"; done
done
for s in $STRATEGIES; do rm -f "$OUT/cal_compute_${s}_none.jsonl"; done
read -ra rates <<< "$RATES"
n=${#rates[@]}
step "2. measured at $RATES, $REPEATS passes over them, the calibration spread among them"
# A rate's repeats are one per pass, not back to back: two runs a minute apart share the machine's phase
# (their errors correlated 0.6-0.7), so their mean measures one phase, not the rate
for p in $(seq 0 $(( REPEATS - 1 ))); do for i in "${!rates[@]}"; do
  rate=${rates[$i]}
  calibrate $(( p * n + i )) $(( REPEATS * n ))
  hosts "$rate"
  [ "$p" -gt 0 ] || sweep "link_$rate"
  for m in $MODELS; do for s in $STRATEGIES; do for w in 2 3; do
    measured "$m" "$rate" "$w" || continue
    f="$OUT/train_${s}_${m}_w${w}_$rate.jsonl" c="$OUT/compute_${s}_${m}_w${w}_$rate.jsonl"
    [ "$p" -gt 0 ] || rm -f "$f" "$c"
    # the compute time from runs of its own just before and just after each (never from the runs it is
    # compared with): predict pools them, so a slow minute in one moves the time less far and widens its interval
    compute_only "$c" "$s" "$m" "$w"
    train "$f" "$s" "$m" "$w" "$(model_batch "$m")" "$(model_steps "$m")"
    compute_only "$c" "$s" "$m" "$w"
  done; done; done
done; done

step "3. predicted from the sweeps, the calibration and the compute runs; compared with the train runs"
headed=0
for rate in "${rates[@]}"; do for m in $MODELS; do for s in $STRATEGIES; do for w in 2 3; do
  measured "$m" "$rate" "$w" || continue  # what 2. ran (not a stale file)
  f="$OUT/train_${s}_${m}_w${w}_$rate.jsonl"
  slow=()
  for r in $CAL_RATES; do slow+=(--overhead "$OUT/cal_${s}_$r.jsonl" --overhead-p2p "$OUT/cal_sweep_$r.jsonl"); done
  $CB predict --p2p "$OUT/link_$rate.jsonl" --train "$f" --compute "$OUT/compute_${s}_${m}_w${w}_$rate.jsonl" \
    --overhead "$OUT/cal_${s}_none.jsonl" --overhead-p2p "$OUT/cal_sweep_none.jsonl" "${slow[@]}" \
    --overhead-compute "$OUT/cal_compute_${s}_none.jsonl" --label "$rate" \
    -o "$OUT/predict.jsonl" | awk -v headed="$headed" '(NR == 3 && !headed) || NR == 4 || /^# warning: /' >&2
  headed=1  # the table's header once, then each prediction's row and its warnings
done; done; done; done
$CB hosts down >/dev/null
echo "launchers/predict.sh: predictions in $OUT/predict.jsonl (commbench show $OUT/predict.jsonl)" >&2
