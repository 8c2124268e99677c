#!/usr/bin/env bash
# The TechJam cases on a GPU box: shapetune's Transformer runner against the PyTorch peer
# (bench/peers/transformer_torch.py) on the same weights and inputs, then the targets judged
# (bench/transformer_targets.py). Per case and dtype, trial 1 times everything (the runner, with
# its per-op times, the materialised reference, eager SDPA and, with --compile, torch.compile
# reduce-overhead); trials 2..N draw fresh weights and inputs (--seed) and check accuracy only.
#
#   bench/transformer_cases.sh OUTDIR [--cases "1 2 3"] [--dtypes "f32 f16 bf16"] [--trials 5]
#                              [--db FILE] [--dispatch tuned|library] [--padding-ratio R] [--launch-overlap]
#                              [--qkv-layout table|split|packed] [--fused-residual table|on|off] [--no-compile]
#
# Defaults: cases 1-13, dtypes f32 f16 bf16, 5 trials, no database (every op its default variant),
# tuned dispatch, no padding. Case 14 (B 32, S 100000, D 1024) only when asked for: one trial, few
# timed forwards (each takes seconds), no torch.compile (its graph pool, 49 GB in f16, leaves an
# 80 GB card too little to compare), about 40 GiB of host memory and 2 x 6.5 GiB of files per
# dtype in OUTDIR (2 x 13 GiB in f32). In f32, whose case 14 has no time target (it must run, and
# one forward takes about 15 s on an H200), each side runs one forward, compared and not timed,
# so the comparison fits one 10-minute device call. Each runner's log is
# OUTDIR/logs/case<C>-<dtype>-<trial>.runner.log, PyTorch's (one process per case and dtype)
# OUTDIR/logs/case<C>-<dtype>.peer.log; the peers' JSON is OUTDIR/peers.json and the verdicts
# OUTDIR/targets.md. Exit 1 when a target fails. Where elements fail the rule, the peer also
# computes the model in float64 at the first 8 of them (--f64-check), so the verdicts say whether
# the runner or what it was compared with is off there.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || { sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$1; shift
cases="1 2 3 4 5 6 7 8 9 10 11 12 13" dtypes="f32 f16 bf16" trials=5 runner_args=() compile=--compile
while [ $# -gt 0 ]; do
  case $1 in
    --cases) cases=$2; shift ;;
    --dtypes) dtypes=$2; shift ;;
    --trials) trials=$2; shift ;;
    --db) runner_args+=(--db "$2"); shift ;;
    --dispatch) runner_args+=(--dispatch "$2"); shift ;;
    --padding-ratio) runner_args+=(--padding-ratio "$2"); shift ;;
    --launch-overlap) runner_args+=(--launch-overlap) ;;
    --qkv-layout) runner_args+=(--qkv-layout "$2"); shift ;;
    --fused-residual) runner_args+=(--fused-residual "$2"); shift ;;
    --no-compile) compile= ;;
    *) echo "transformer_cases.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
shapetune=${BUILD_DIR:-build-gpu}/shapetune
[ -x "$shapetune" ] || { echo "transformer_cases.sh: no $shapetune (BUILD_DIR)" >&2; exit 2; }
mkdir -p "$out/logs" "$out/tensors"
status=0
for c in $cases; do
  for dt in $dtypes; do
    n=$trials timing=(--warmup 10 --iterations 50) peer_timing=(--warmup 10 --iterations 50) peer_compile=$compile
    op_times=--op-times
    if [ "$c" = 14 ]; then
      n=1 timing=(--warmup 1 --iterations 5) peer_timing=(--warmup 1 --iterations 3) peer_compile=
      [ "$dt" = f32 ] && timing=(--warmup 0 --iterations 1) peer_timing=(--no-timing) op_times=
    fi
    log=$out/logs/case$c-$dt peer=() us=
    echo "== case $c $dt, $n trial(s)"
    for t in $(seq 1 "$n"); do
      w=$out/tensors/w$t.st x=$out/tensors/x$t.st y=$out/tensors/y$t.st
      # Trial 1 also shows where the forward's time goes (--op-times); the others only check.
      if [ "$t" = 1 ]; then timing+=($op_times); else timing=(--warmup 0 --iterations 1); fi
      if ! "$shapetune" run transformer --case "$c" --dtype "$dt" --seed "$t" "${runner_args[@]}" "${timing[@]}" \
          --save-weights "$w" --save-input "$x" -o "$y" > "$log-$t.runner.log" 2>&1; then
        echo "   trial $t: runner failed: $(tail -1 "$log-$t.runner.log")"; status=1; continue
      fi
      if [ ${#peer[@]} = 0 ]; then  # the first trial that ran is the timed one
        heads=$(sed -n 's/^Transformer .*heads \([0-9]*\),.*/\1/p' "$log-$t.runner.log" | head -1)
        us=$(sed -n 's/^forward: median \([0-9.]*\) us.*/\1/p' "$log-$t.runner.log")
        peer=(--weights "$w" --input "$x" --heads "$heads" --dtype "$dt" --compare "$y" --f64-check 8
              --label "case $c $dt trial $t" --json "$out/peers.json")
        if [ "$t" = 1 ]; then peer+=("${peer_timing[@]}" --runner-us "$us" $peer_compile); else peer+=(--no-timing); fi
      else
        peer+=(--also "$w" "$x" "$y" "case $c $dt trial $t")
      fi
    done
    # One PyTorch process per case and dtype: trial 1 timed, the others compared only.
    [ ${#peer[@]} = 0 ] && continue
    python3 bench/peers/transformer_torch.py "${peer[@]}" > "$log.peer.log" 2>&1 || status=1
    echo "   runner $us us; $(grep -c '"failing": 0,' "$log.peer.log") of $n trial(s) within the rule; $(head -1 "$log.peer.log" | cut -c1-200)"
    rm -f "$out"/tensors/*
  done
done
rm -rf "$out/tensors"
python3 bench/transformer_targets.py "$out/peers.json" | tee "$out/targets.md"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
