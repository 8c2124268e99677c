#!/usr/bin/env bash
# Issue 23's character-level LSTM/GRU protocol on a GPU box: per configuration (cell, layers,
# hidden, seq-len; batch 64) the runner trains 100 steps and runs the statistical suite (50
# warm-up, 150 timed steps) with the tuned and the library dispatch, once more for 1 step (the
# parameters after step 1), then bench/peers/char_lm_torch.py trains the same network from the
# same weights on the same batches, compares losses, parameters and validation bits per character
# and times its modes the same way; bench/char_lm_targets.py judges it all.
#
#   bench/char_lm_cases.sh OUTDIR [--cells "lstm gru"] [--layers "1 2"] [--hiddens "128 256 512"]
#                          [--seq-lens "64 128"] [--db FILE] [--data FILE] [--modes LIST] [--no-peer]
#
# Defaults: every configuration of shapes/char_lm.yaml (24; more than one 10-minute device call
# holds: pass a few per call), no database (every op its default variant; tune first with
# `shapetune sweep shapes/char_lm.yaml --db char_lm.db --hot` and pass --db), the corpus
# data/jargon.txt.gz when carried beside the tree (copy Debian's jargon-text file there on the
# CPU machine and carry data/: the GPU box may lack the package), else Debian's, the peer's four
# modes. Per configuration OUTDIR/<cell>-L<layers>-H<hidden>-T<seq-len>/ holds tuned.json,
# library.json, torch.json and the logs; the verdicts go to OUTDIR/targets.md. Exit 1 when a
# step fails or a target is missed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$1; shift
cells="lstm gru" layers="1 2" hiddens="128 256 512" seq_lens="64 128" db=() modes=eager,eager_fused,compile,cuda_graph
peer=1 data=/usr/share/doc/jargon-text/jargon.txt.gz
[ -f data/jargon.txt.gz ] && data=$PWD/data/jargon.txt.gz
while [ $# -gt 0 ]; do
  case $1 in
    --cells) cells=$2; shift ;;
    --layers) layers=$2; shift ;;
    --hiddens) hiddens=$2; shift ;;
    --seq-lens) seq_lens=$2; shift ;;
    --db) db=(--db "$2"); shift ;;
    --data) data=$2; shift ;;
    --modes) modes=$2; shift ;;
    --no-peer) peer=0 ;;
    *) echo "char_lm_cases.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
shapetune=${BUILD_DIR:-build-gpu}/shapetune
[ -x "$shapetune" ] || { echo "char_lm_cases.sh: no $shapetune (BUILD_DIR)" >&2; exit 2; }
[ -f "$data" ] || { echo "char_lm_cases.sh: no corpus at $data (carry data/jargon.txt.gz or pass --data)" >&2; exit 2; }
mkdir -p "$out"
status=0
run() {  # NAME ARGS...: one runner call of the configuration ($model, $dir), its log in $dir/NAME.log
  local name=$1; shift
  if ! "$shapetune" "${model[@]}" "$@" > "$dir/$name.log" 2>&1; then
    echo "   $name failed: $(tail -1 "$dir/$name.log")"; status=1; return 1
  fi
  grep -E '^  median|^loss after' "$dir/$name.log" | sed "s/^ */   $name: /"
}
for cell in $cells; do
  for l in $layers; do
    for h in $hiddens; do
      for t in $seq_lens; do
        dir=$out/$cell-L$l-H$h-T$t
        mkdir -p "$dir"
        model=(train "$cell" --layers "$l" --hidden "$h" --seq-len "$t" --batch 64 --data "$data" --seed 1 --sample 0
               "${db[@]}")
        echo "== $cell, $l layer(s), hidden $h, seq-len $t"
        run tuned --steps 100 --timing-suite --op-times --save-weights "$dir/weights.st" --save-batches "$dir/batches.st" \
          --save-trained "$dir/after100.st" --results "$dir/tuned.json" || continue
        run after1 --steps 1 --save-trained "$dir/after1.st"
        run library --dispatch library --steps 100 --timing-suite --op-times --results "$dir/library.json"
        [ $peer = 1 ] || continue
        python3 bench/peers/char_lm_torch.py --weights "$dir/weights.st" --batches "$dir/batches.st" \
          --runner-results "$dir/tuned.json" --runner-trained 1="$dir/after1.st" \
          --runner-trained 100="$dir/after100.st" --modes "$modes" --json "$dir/torch.json" > "$dir/torch.log" 2>&1
        rc=$?
        sed 's/^/   peer: /' "$dir/torch.log"
        [ $rc = 0 ] || { echo "   peer: exit $rc (a parity check missed, or the peer failed: its output above)"; status=1; }
      done
    done
  done
done
python3 bench/char_lm_targets.py "$out" | tee "$out/targets.md"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
