#!/usr/bin/env python3
"""Issue 23's target for the logistic-regression runner, judged from `shapetune train logreg
--results RUNNER.json` and bench/peers/logreg_torch.py's --json on the same data, classes, epochs,
batch and lr (both start from w = 0, b = 0): the runner reaches the test accuracy PyTorch reaches,
within 0.1 percentage point (two of the default pair's 2000 test rows: fp32 rounding may move a
row lying at p = 1/2 to either side). Median step times are shown beside it. Prints a Markdown
table; exit code 1 if the target is missed, 2 if the runs are not comparable. A benchmark
verdict, never a test.

    bench/logreg_targets.py RUNNER.json TORCH.json [LIBRARY.json]
"""
import json
import statistics
import sys

ACCURACY_SLACK = 0.001  # a fraction: 0.1 percentage point


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    runner, torch = load(sys.argv[1]), load(sys.argv[2])
    library = load(sys.argv[3]) if len(sys.argv) == 4 else None
    for key in ("classes", "batch", "lr"):
        if runner.get(key) != torch.get(key):
            print(f"not comparable: {key} is {runner.get(key)} for the runner, {torch.get(key)} for PyTorch",
                  file=sys.stderr)
            return 2
    if len(runner["epochs"]) != len(torch["epochs"]):
        print(f"not comparable: {len(runner['epochs'])} epochs against {len(torch['epochs'])}", file=sys.stderr)
        return 2
    if runner.get("shuffle"):
        print("not comparable: the runner shuffled (the peer keeps file order)", file=sys.stderr)
        return 2
    mine, theirs = runner["epochs"][-1]["test_accuracy"], torch["epochs"][-1]["test_accuracy"]
    met = mine >= theirs - ACCURACY_SLACK
    step = lambda run: statistics.median(e["median_step_ms"] for e in run["epochs"])
    print("## Logistic regression runner (issue 23)\n\n| target | measured | verdict |\n|---|---|---|")
    print(f"| test accuracy after {len(runner['epochs'])} epochs >= PyTorch's (0.1 point slack) | "
          f"{100 * mine:.2f}% vs {100 * theirs:.2f}% (classes {runner['classes']}, batch {runner['batch']}, "
          f"X {runner.get('dtype', 'f32')}) | {'met' if met else 'MISSED'} |")
    line = f"\nMedian step time: runner {step(runner):.4f} ms, PyTorch eager {step(torch):.4f} ms"
    if library:
        line += f", runner with --dispatch library {step(library):.4f} ms"
    print(line)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
