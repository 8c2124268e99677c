#!/usr/bin/env bash
# bench/transformer_targets.py on made-up peers.json files: every target met (exit 0), one trial
# outside the rule (exit 1, and the row says whether it is at or below PyTorch SDPA's own count),
# a case slower than torch.compile (exit 1), no labelled run (exit 2); two files judged together
# (the 13 cases split over two calls), and the same run in both refused (exit 2); the float64 check
# at failing elements counted per case and dtype.
set -euo pipefail
judge="$(dirname "$0")/../../bench/transformer_targets.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def run(case, dtype, trial, **kw):
    r = {"label": f"case {case} {dtype} trial {trial}", "failing": 0, "elements": 100, "compared_with": "reference",
         "sdpa_failing": 3, "max_abs_error": 0.001, "nonzero_padding": 0}
    if trial == 1:
        r.update(runner_us=100.0, reference_us=1500.0, compiled_us=200.0, sdpa_us=400.0)
    r.update(kw)
    return r
good = [run(c, t, k) for c in range(1, 14) for t in ("f32", "f16", "bf16") for k in (1, 2)]
good.append(run(14, "f16", 1, runner_us=4.2e6, compared_with="sdpa", reference_us=None, compiled_us=None))
json.dump(good, open(f"{d}/good.json", "w"))
bad = [dict(r) for r in good]
bad[3]["failing"] = 2   # case 1 f16 trial 2
json.dump(bad, open(f"{d}/inaccurate.json", "w"))
# The float64 check at the failing elements: trial 1 of case 2 f16 has two, the runner within the
# rule of float64 at both, the reference at one.
checked = [dict(r) for r in good]
checked[8].update(failing=2, f64_check=[{"b": 0, "s": 5, "d": 1, "ours": 0.5, "ref": 0.53, "f64": 0.5},
                                        {"b": 0, "s": 9, "d": 2, "ours": 1.0, "ref": 1.0, "f64": 1.001}],
                  f64_ours_within=2, f64_ref_within=1)
json.dump(checked, open(f"{d}/checked.json", "w"))
slow = [dict(r) for r in good]
slow[0]["compiled_us"] = 90.0   # case 1 f32 trial 1
json.dump(slow, open(f"{d}/slow.json", "w"))
json.dump([{"label": "something else"}], open(f"{d}/unlabelled.json", "w"))
json.dump([r for r in good if not r["label"].startswith("case 6 ")], open(f"{d}/without6.json", "w"))
json.dump([r for r in good if r["label"].startswith("case 6 ")], open(f"{d}/case6.json", "w"))
PY
expect() {  # expect CODE "FILE [FILE...]" PATTERN
  local files=()
  for f in $2; do files+=("$dir/$f"); done
  set +e; out=$(python3 "$judge" "${files[@]}" 2>&1); code=$?; set -e
  [ "$code" = "$1" ] || { echo "FAIL: $2 exited $code, expected $1"; echo "$out"; exit 1; }
  grep -q -- "$3" <<<"$out" || { echo "FAIL: $2: no '$3' in"; echo "$out"; exit 1; }
}
expect 0 good.json "f16: geomean 15.00x the materialised reference over 13 cases (target >= 10x over 13): PASS"
expect 0 good.json "| 14 | f16 | 4200000.0 |"
expect 1 inaccurate.json "| 1 | f16 | 2 | 2 of 100 | reference | 3 | 0.001 | - | FAIL (at or below SDPA) |"
expect 1 checked.json "| 2 | f16 | 2 | 2 of 100 | reference | 3 | 0.001 | 2 / 1 of 2 | FAIL (at or below SDPA) |"
expect 1 slow.json "| 1 | f32 | 100.0 | 1500.0 | 15.00 | 400.0 | 90.0 | 0.90 |"
expect 2 unlabelled.json "no run labelled"
expect 1 without6.json "f16: geomean 15.00x the materialised reference over 12 cases (target >= 10x over 13): FAIL"
expect 0 "without6.json case6.json" \
  "f16: geomean 15.00x the materialised reference over 13 cases (target >= 10x over 13): PASS"
expect 2 "good.json case6.json" "'case 6 f32 trial 1' is in"
echo "transformer_targets.py: 9 checks passed"
