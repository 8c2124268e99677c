#!/usr/bin/env python3
"""Issue 23's targets for the character-level LSTM/GRU runners, judged from one
bench/char_lm_cases.sh OUTDIR: per configuration directory (<cell>-L<layers>-H<hidden>-T<seq-len>)
the runner's tuned.json and library.json (`train lstm|gru --steps 100 --timing-suite --results`)
and the peer's torch.json (bench/peers/char_lm_torch.py), all measured on the same GPU in the same
call. Step times are the statistical suite's medians (50 warm-up, 150 timed steps on both sides).
Prints a Markdown table per configuration and a summary; exit code 1 if a target that could be
judged is missed. A benchmark verdict, never a test.

    bench/char_lm_targets.py OUTDIR

Targets (issue 23), per configuration at batch 64, seq-len 64..128, hidden 128..512:
  - tuned step time (suite median) >= 2x faster than PyTorch eager nn.LSTM/nn.GRU training;
  - and not slower than the fastest PyTorch variant measured (eager_fused, compile, cuda_graph);
  - the statistical suite ran as the original work's: 50 warm-up, 150 timed, median/p10/p90;
  - parity: the peer's checks (losses after steps 1 and 100, parameters after steps 1 and 100);
  - validation bits per character after 100 steps within 2% of PyTorch's (one of those checks);
  - the library dispatch ran (cuDNN's RNN and cuBLAS), shown beside the tuned time.
Also shown: how the tuned run's recurrent layers resolved (variant, config, table match), so that a
step time can be read against the rows it ran.
"""
import json
import os
import sys

from results import load

FASTER_MODES = ("eager_fused", "compile", "cuda_graph")


def suite(run):
    """(median, p10, p90, warm-up, timed) of a runner's or a peer mode's timing suite, or None."""
    t = (run or {}).get("timing_suite")
    if not t:
        return None
    return t["median_step_ms"], t["p10_step_ms"], t["p90_step_ms"], t["warmup_steps"], t["timed_steps"]


def spread(s):
    return f"{s[0]:.3f} ms (p10 {s[1]:.3f}, p90 {s[2]:.3f})"


def judge(name, directory):
    tuned, library = load(f"{directory}/tuned.json"), load(f"{directory}/library.json")
    torch = load(f"{directory}/torch.json")
    rows, verdicts = [], []

    def add(target, measured, passed):
        verdicts.append(passed)
        verdict = "not measured" if passed is None else ("met" if passed else "MISSED")
        rows.append(f"| {target} | {measured} | {verdict} |")

    mine = suite(tuned)
    if mine:
        add("statistical suite: 50 warm-up, 150 timed steps, median/p10/p90", f"{mine[3]} + {mine[4]}: {spread(mine)}",
            mine[3] == 50 and mine[4] == 150)
    else:
        add("statistical suite: 50 warm-up, 150 timed steps, median/p10/p90", "no tuned run with --timing-suite", None)
    modes = (torch or {}).get("modes", {})
    eager = suite(modes.get("eager"))
    if mine and eager:
        add(">= 2x faster than PyTorch eager", f"{mine[0]:.3f} ms vs {spread(eager)} ({eager[0] / mine[0]:.2f}x)",
            eager[0] / mine[0] >= 2)
    else:
        add(">= 2x faster than PyTorch eager", modes.get("eager", {}).get("error", "not measured"), None)
    faster = {m: suite(modes.get(m)) for m in FASTER_MODES if suite(modes.get(m))}
    if mine and faster:
        best = min(faster, key=lambda m: faster[m][0])
        add("not slower than the fastest PyTorch variant",
            f"{mine[0]:.3f} ms vs {best} {spread(faster[best])} ({faster[best][0] / mine[0]:.2f}x)",
            mine[0] <= faster[best][0])
    else:
        add("not slower than the fastest PyTorch variant", "no faster PyTorch mode measured", None)
    checks = [(m, c) for m, v in modes.items() for c in v.get("parity", [])]
    if checks:
        missed = [f"{m}: {c['check']}" for m, c in checks if not c["ok"]]
        add("parity with PyTorch (losses after steps 1 and 100, parameters after steps 1 and 100)",
            f"{len(checks) - len(missed)} of {len(checks)} checks within tolerance"
            + (" (missed: " + "; ".join(missed) + ")" if missed else ""), not missed)
    else:
        add("parity with PyTorch", "no comparison (the peer needs --runner-results and --runner-trained)", None)
    bpc = [(m, c) for m, c in checks if c["check"].startswith("validation bits per character")]
    if bpc:
        m, c = next(((m, c) for m, c in bpc if m == "eager"), bpc[0])
        add("validation bpc after 100 steps within 2% of PyTorch's",
            f"{c['runner']:.4f} vs {c['torch']:.4f} ({m}, {100 * c['relative_difference']:.2f}%)", c["ok"])
    else:
        add("validation bpc after 100 steps within 2% of PyTorch's", "not compared", None)
    recurrent = [r for r in (tuned or {}).get("resolutions", [])
                 if r.get("problem", "").split("/")[0] in ("lstm.backward", "gru.backward")]
    if recurrent:
        rows.append("| (tuned recurrent layers) | " + "; ".join(
            f"{r['op']}: {r['variant']}{{{r['config']}}} ({r['source']})" for r in recurrent) + " | shown |")
    lib = suite(library)
    if lib:
        rows.append(f"| (library dispatch: cuDNN RNN, cuBLAS) | {spread(lib)}"
                    + (f"; tuned {lib[0] / mine[0]:.2f}x as fast" if mine else "") + " | shown |")
    else:
        add("--dispatch library runs", "no library run", None)
    print(f"### {name}\n\n| target | measured | verdict |\n|---|---|---|")
    print("\n".join(rows) + "\n")
    return verdicts


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    configs = sorted(d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "tuned.json"))
                     or os.path.isfile(os.path.join(out, d, "torch.json")))
    if not configs:
        print(f"{out}: no configuration directory with tuned.json or torch.json", file=sys.stderr)
        return 2
    print("## Character-level LSTM/GRU runners (issue 23)\n")
    verdicts = []
    for name in configs:
        verdicts += judge(name, os.path.join(out, name))
    met, missed = verdicts.count(True), verdicts.count(False)
    print(f"{len(configs)} configurations: {met} targets met, {missed} missed, {verdicts.count(None)} not measured")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
