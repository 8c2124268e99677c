#!/usr/bin/env python3
"""Issue 22's targets judged from bench/transformer_cases.sh's peers.json (a list of
bench/peers/transformer_torch.py results labelled "case C DTYPE trial K").

    bench/transformer_targets.py OUTDIR/peers.json [OTHER/peers.json ...]

Several files judge the runs of several calls together (the cases of one dtype split over two
device calls, say): each (case, dtype, trial) must come from one file only.

- Accuracy: a case passes in a dtype when every trial's output is within the TechJam rule of the
  materialised reference (0 failing elements, exact zeros at padded positions). Beside it, the
  elements PyTorch's own SDPA model fails against the same reference: the floor a flash attention
  meets (a runner at or below it rounds no worse than PyTorch's fast path); and, where the peer
  checked failing elements against the model in float64 (--f64-check), how many of them the runner,
  and how many what it was compared with, are within the rule of the float64 value.
- Speed (trial 1, f32 and f16, cases 1-13): geomean of reference / runner >= 10x, and the runner
  faster than torch.compile (reduce-overhead) of the SDPA model on every case.
- Case 14: runs in f16 and bf16 in <= 5 s (median forward), within the rule of the SDPA model.
Prints Markdown; exit 1 when a judged target fails, 2 on unusable input.
"""
import json
import math
import re
import sys
from collections import defaultdict

LABEL = re.compile(r"case (\d+) (f32|f16|bf16) trial (\d+)$")


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    by = defaultdict(list)
    source = {}  # (case, dtype, trial) -> the file it came from
    for path in sys.argv[1:]:
        try:
            with open(path) as f:
                runs = json.load(f)
        except (OSError, ValueError) as e:
            print(f"transformer_targets.py: {path}: {e}", file=sys.stderr)
            return 2
        for r in runs:
            m = LABEL.match(r.get("label", ""))
            if not m:
                continue
            key = (int(m[1]), m[2], int(m[3]))
            if key in source:
                print(f"transformer_targets.py: {path}: '{r['label']}' is in {source[key]} too; "
                      "judge each run once", file=sys.stderr)
                return 2
            source[key] = path
            by[(key[0], key[1])].append((key[2], r))
    if not by:
        print(f"transformer_targets.py: {', '.join(sys.argv[1:])}: no run labelled 'case C DTYPE trial K'",
              file=sys.stderr)
        return 2
    ok = True
    lines = ["### Accuracy (TechJam rule, every trial)", "",
             "| case | dtype | trials | failing elements (worst trial) | compared with | PyTorch SDPA fails (worst) | max abs error | "
             "float64 at failing elements: ours / compared-with within the rule | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (case, dtype), trials in sorted(by.items()):
        rs = [r for _, r in trials]
        if any("failing" not in r for r in rs):
            lines.append(f"| {case} | {dtype} | {len(rs)} | no comparison | | | | | FAIL |")
            ok = False
            continue
        failing = max(r["failing"] + r.get("nonzero_padding", 0) for r in rs)
        floor = max((r["sdpa_failing"] for r in rs if "sdpa_failing" in r), default=None)
        passed = failing == 0
        ok &= passed
        checked = sum(len(r.get("f64_check", [])) for r in rs)
        exact = (f"{sum(r.get('f64_ours_within', 0) for r in rs)} / {sum(r.get('f64_ref_within', 0) for r in rs)} "
                 f"of {checked}") if checked else "-"
        lines.append(f"| {case} | {dtype} | {len(rs)} | {failing} of {rs[0]['elements']} | {rs[0]['compared_with']} | "
                     f"{'-' if floor is None else floor} | {max(r['max_abs_error'] for r in rs):.4g} | {exact} | "
                     f"{'PASS' if passed else ('FAIL (at or below SDPA)' if floor is not None and failing <= floor else 'FAIL')} |")
    lines += ["", "### Speed (trial 1, median forward)", "",
              "| case | dtype | runner us | reference us | x reference | SDPA us | compiled us | x compiled |",
              "|---|---|---|---|---|---|---|---|"]
    speedups = defaultdict(list)
    for (case, dtype), trials in sorted(by.items()):
        first = dict(trials).get(1)
        if not first or "runner_us" not in first:
            continue
        ours = first["runner_us"]
        ref, comp = first.get("reference_us"), first.get("compiled_us")
        x_ref = ref / ours if ref else None
        x_comp = comp / ours if comp else None
        if case <= 13 and dtype in ("f32", "f16"):
            if x_ref:
                speedups[dtype].append(x_ref)
            if x_comp is None or x_comp < 1:
                ok = False
        if case == 14 and dtype in ("f16", "bf16") and ours > 5e6:
            ok = False
        fmt = lambda v, spec: "-" if v is None else format(v, spec)
        lines.append(f"| {case} | {dtype} | {ours:.1f} | {fmt(ref, '.1f')} | {fmt(x_ref, '.2f')} | "
                     f"{fmt(first.get('sdpa_us'), '.1f')} | {fmt(comp, '.1f')} | {fmt(x_comp, '.2f')} |")
    lines += ["", "### Targets", ""]
    for dtype in ("f32", "f16"):
        xs = speedups.get(dtype)
        if xs:
            g = math.exp(sum(map(math.log, xs)) / len(xs))
            ok &= g >= 10 and len(xs) == 13
            lines.append(f"- {dtype}: geomean {g:.2f}x the materialised reference over {len(xs)} cases (target >= 10x "
                         f"over 13): {'PASS' if g >= 10 and len(xs) == 13 else 'FAIL'}")
    lines.append("- faster than torch.compile on every timed f32/f16 case of 1-13, case 14 within 5 s and every "
                 "accuracy row: see the tables; " + ("all PASS" if ok else "at least one FAIL"))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
