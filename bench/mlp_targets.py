#!/usr/bin/env python3
"""Issue 6's targets for the MLP runner, judged from one gpu-check run: `shapetune train mlp
--results` of the tuned and the library dispatch, and bench/peers/mlp_torch.py's JSON, all
measured on the same GPU in the same call. Epoch times are the median over epochs 2..N (the
first holds graph capture or torch.compile's compilation). Prints a Markdown table; exit code 1
if a target that could be judged is missed. A benchmark verdict, never a test.

    bench/mlp_targets.py TUNED.json LIBRARY.json [TORCH.json] [--seed-run OTHER_SEED.json ...]
                         [--adam-after-graph TUNED_ADAM_AFTER_GRAPH.json]

--seed-run: tuned runs with other seeds, listed beside the default seed's final accuracy (the
target is judged on the default run; the others show how much of a margin is seed noise).
"""
import statistics
import sys

from results import load


def steady(epochs):
    times = [e["train_seconds"] for e in epochs[1:]] or [e["train_seconds"] for e in epochs]
    return statistics.median(times) if times else None


def main():
    args, seed_runs, after_path = [], [], None
    argv = sys.argv[1:]
    while argv:
        a = argv.pop(0)
        if a == "--seed-run" and argv:
            seed_runs.append(argv.pop(0))
        elif a == "--adam-after-graph" and argv:
            after_path = argv.pop(0)
        else:
            args.append(a)
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    tuned, library = load(args[0]), load(args[1])
    torch = load(args[2]) if len(args) > 2 else None
    rows, ok = [], True

    def add(target, measured, passed):
        nonlocal ok
        verdict = "not measured" if passed is None else ("met" if passed else "MISSED")
        ok &= passed is not False
        rows.append(f"| {target} | {measured} | {verdict} |")

    if tuned:
        e = tuned["epochs"]
        acc = e[-1]["test_accuracy"]
        add(f">= 89% test accuracy after 15 epochs, batch 128 (tuned dispatch)",
            f"{100 * acc:.2f}% after {len(e)} epochs, batch {tuned['batch']}",
            acc >= 0.89 and len(e) >= 15 and tuned["batch"] == 128)
    else:
        add(">= 89% test accuracy after 15 epochs", "no tuned run", None)
    t_tuned = steady(tuned["epochs"]) if tuned else None
    t_lib = steady(library["epochs"]) if library else None
    if t_tuned and t_lib:
        add("tuned epoch faster than library epoch", f"{1e3 * t_tuned:.1f} ms vs {1e3 * t_lib:.1f} ms "
            f"({t_lib / t_tuned:.2f}x)", t_tuned < t_lib)
    else:
        add("tuned epoch faster than library epoch", "missing run", None)
    modes = (torch or {}).get("modes", {})
    for mode, factor, label in [("eager", 2.0, ">= 2x faster than PyTorch eager"),
                                ("compile", 1.0, "not slower than torch.compile(mode=\"reduce-overhead\")")]:
        m = modes.get(mode, {})
        if not t_tuned or "epochs" not in m:
            add(label, m.get("error", "not measured"), None)
            continue
        t = steady(m["epochs"])
        add(label, f"{1e3 * t_tuned:.1f} ms vs {1e3 * t:.1f} ms per epoch ({t / t_tuned:.2f}x)",
            t / t_tuned >= factor)
    print("## MLP runner (issue 6)\n\n| target | measured | verdict |\n|---|---|---|")
    print("\n".join(rows))
    after = load(after_path) if after_path else None
    if t_tuned and after:
        t = steady(after["epochs"])
        print(f"\nAdam launched after each replay, tuned: {1e3 * t:.1f} ms per epoch vs {1e3 * t_tuned:.1f} ms with "
              f"Adam a child graph swapped into the step graph ({t / t_tuned:.2f}x)")
    others = [r for r in map(load, seed_runs) if r]
    if tuned and others:
        finals = [(tuned["seed"], tuned["epochs"][-1]["test_accuracy"])] + [
            (r["seed"], r["epochs"][-1]["test_accuracy"]) for r in others]
        accs = [a for _, a in finals]
        print("\nFinal test accuracy by seed (tuned): " + ", ".join(f"seed {s} {100 * a:.2f}%" for s, a in finals)
              + f"; mean {100 * statistics.mean(accs):.2f}%, min {100 * min(accs):.2f}%, max {100 * max(accs):.2f}%")
    if torch:
        print("\nPyTorch " + torch.get("torch", "?") + ": " + "; ".join(
            f"{k} {1e3 * steady(v['epochs']):.1f} ms/epoch, {100 * v['final_test_accuracy']:.2f}%"
            for k, v in modes.items() if "epochs" in v))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
