#!/usr/bin/env python3
"""The foundation issue's softmax targets, judged from one gpu-check run: the sweep database
(winners, the copy ceiling measured in that run) and the PyTorch peer numbers of the same run.
Prints a Markdown table; exit code 1 if a target is missed. A benchmark verdict, not a test."""
import json
import sqlite3
import sys

# Figures from shared/notes/gpu-box.md (PyTorch 2.11 on an H200), kept beside this run's own.
NOTES_TORCH_TBPS = {(4096, 4096): 2.33, (8192, 32000): 2.53}


def main(db_path, peers_path):
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    copy = db.execute("SELECT value FROM ceilings WHERE name = 'dram_copy_best'").fetchone()[0]
    peers = {}
    if peers_path:
        with open(peers_path) as f:
            for r in json.load(f)["results"]:
                peers[(r["rows"], r["cols"], r["dtype"])] = r["median_us"]

    def winner(rows, cols):
        row = db.execute(
            "SELECT variant, config_key, median_us, best_baseline, baseline_us, timing_mode FROM winners "
            "WHERE problem_key = ?", (f"softmax/f32/rows={rows},cols={cols}",)).fetchone()
        if row is None:
            sys.exit(f"no winner for softmax/f32/rows={rows},cols={cols}")
        return row

    lines = ["| target | measured | verdict |", "|---|---|---|"]
    ok = True

    variant, config, us, _, _, mode = winner(65536, 1024)
    tbps = 2 * 65536 * 1024 * 4 / (us * 1e-6) / 1e12
    frac = tbps * 1e12 / copy
    passed = frac >= 0.90
    ok &= passed
    lines.append(f"| softmax 65536x1024 f32 >= 90% of copy bandwidth ({copy / 1e12:.2f} TB/s) | "
                 f"{variant}{{{config}}} {us:.1f} us, {tbps:.2f} TB/s = {100 * frac:.1f}% ({mode}) | "
                 f"{'PASS' if passed else 'FAIL'} |")

    for rows, cols in [(4096, 4096), (8192, 32000)]:
        variant, config, us, baseline, baseline_us, mode = winner(rows, cols)
        tbps = 2 * rows * cols * 4 / (us * 1e-6) / 1e12
        torch_us = peers.get((rows, cols, "f32"))
        beats_cudnn = baseline == "cudnn" and us < baseline_us
        beats_torch_here = torch_us is not None and us < torch_us
        beats_notes = tbps > NOTES_TORCH_TBPS[(rows, cols)]
        passed = beats_cudnn and beats_torch_here and beats_notes
        ok &= passed
        torch_text = f"{torch_us:.1f} us" if torch_us is not None else "not measured"
        lines.append(f"| softmax {rows}x{cols} f32 beats cuDNN, PyTorch in this run and the notes' "
                     f"{NOTES_TORCH_TBPS[(rows, cols)]} TB/s | {variant}{{{config}}} {us:.1f} us ({tbps:.2f} TB/s, "
                     f"{mode}); cuDNN {baseline_us:.1f} us; torch {torch_text} | {'PASS' if passed else 'FAIL'} |")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: softmax_targets.py DB [PEERS.json]")
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None))
