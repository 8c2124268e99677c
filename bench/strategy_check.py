#!/usr/bin/env python3
"""Successive halving against exhaustive search, judged from one database in which the same
problems were swept twice on one device: once exhaustively and once with halving
(`shapetune sweep FILE --db DB`, then `shapetune sweep FILE --db DB --strategy halving`).

    bench/strategy_check.py DB [--exhaustive SWEEP_ID] [--halving SWEEP_ID]
                               [--within 0.05] [--max-fraction 0.30]

Without ids, the latest sweep with a halving problem is compared with the latest sweep before
or after it, on the same device, with exhaustive problems. Per problem in both it prints the
supported candidates, how many each sweep measured fully, the samples each took, both winners
and the target's verdict: the halving winner within `--within` of the exhaustive winner's time
while fully measuring at most `--max-fraction` of the supported candidates. Exit code 1 when a
compared problem misses it, 2 when there is nothing to compare. A benchmark verdict, not a test.

The winners table holds one winner per problem (the last sweep's), so winners are recomputed
per sweep from the candidates table: the fastest ok candidate by median_us among full
measurements (race rows, whose stop_reason starts with "halving rung", only ranked candidates).
"""
import argparse
import re
import sqlite3
import sys
from datetime import datetime

RACE_PREFIX = "halving rung"
# sweep_problems.reason, as tuner/sweep.cpp writes it: "<strategy> (...): measured F/S, raced R
# in K rungs (N samples), pruned ..."; before strategies existed it was "" or "budget: ...".
REASON = re.compile(r"^(?P<strategy>exhaustive|random|halving)\b")
RACE_SAMPLES = re.compile(r"raced \d+ in \d+ rungs? \((?P<samples>\d+) samples\)")


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def strategy_of(reason):
    match = REASON.match(reason or "")
    return match.group("strategy") if match else "exhaustive"  # sweeps from before strategies


class Sweep:
    def __init__(self, db, sweep_id):
        self.id = sweep_id
        row = db.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        if row is None:
            fail(f"no sweep #{sweep_id} in the database")
        self.row = row
        self.problems = {}  # problem_key -> (status, reason)
        for r in db.execute("SELECT problem_key, status, reason FROM sweep_problems WHERE sweep_id = ?", (sweep_id,)):
            self.problems[r["problem_key"]] = (r["status"], r["reason"])
        self.candidates = {}  # problem_key -> [rows]
        for r in db.execute("SELECT * FROM candidates WHERE sweep_id = ? ORDER BY id", (sweep_id,)):
            self.candidates.setdefault(r["problem_key"], []).append(r)

    def seconds(self):
        try:
            start = datetime.fromisoformat(self.row["started_at"].replace("Z", "+00:00"))
            end = datetime.fromisoformat(self.row["finished_at"].replace("Z", "+00:00"))
            return (end - start).total_seconds()
        except (AttributeError, TypeError, ValueError):
            return None  # unfinished

    def strategy(self, key):
        status, reason = self.problems.get(key, ("", ""))
        return strategy_of(reason) if status == "done" else None

    def summary(self, key):
        rows = self.candidates.get(key, [])
        full = [r for r in rows if r["median_us"] is not None and not (r["stop_reason"] or "").startswith(RACE_PREFIX)]
        ok_full = [r for r in full if r["status"] == "ok"]
        winner = min(ok_full, key=lambda r: r["median_us"]) if ok_full else None
        reason = self.problems.get(key, ("", ""))[1]
        race = RACE_SAMPLES.search(reason or "")
        samples = sum(r["samples"] or 0 for r in full)
        race_rows = [r for r in rows if (r["stop_reason"] or "").startswith(RACE_PREFIX)]
        # The reason counts every race sample of the run that finished the problem; without it
        # (a resumed problem's earlier runs are not in it) only the rows' last rungs are known.
        samples += int(race.group("samples")) if race else sum(r["samples"] or 0 for r in race_rows)
        return {
            "supported": sum(1 for r in rows if r["status"] != "unsupported"),
            "full": len(full),
            "raced": len(race_rows) + sum(1 for r in full if "halving final rung" in (r["stop_reason"] or "")),
            "samples": samples,
            "samples_exact": race is not None or not race_rows,
            "winner": winner,
            "medians": {(r["variant"], r["config_key"]): r["median_us"] for r in full if r["status"] == "ok"},
            "budget_cut": "budget:" in (reason or ""),
        }


def pick_sweeps(db, args):
    rows = db.execute("SELECT id, device_key FROM sweeps ORDER BY id").fetchall()
    strategies = {}
    for r in rows:
        reasons = db.execute("SELECT status, reason FROM sweep_problems WHERE sweep_id = ?", (r["id"],)).fetchall()
        strategies[r["id"]] = {strategy_of(x["reason"]) for x in reasons if x["status"] == "done"}
    device = {r["id"]: r["device_key"] for r in rows}
    for given in (args.halving, args.exhaustive):
        if given is not None and given not in device:
            fail(f"no sweep #{given} in the database")
    halving = args.halving or next((i for i in reversed(list(device)) if "halving" in strategies[i]), None)
    if halving is None:
        fail("no sweep with halving problems; pass --halving SWEEP_ID")
    exhaustive = args.exhaustive or next(
        (i for i in sorted(device, key=lambda i: abs(i - halving))
         if i != halving and device[i] == device.get(halving) and "exhaustive" in strategies[i]), None)
    if exhaustive is None:
        fail(f"no other sweep with exhaustive problems on the device of sweep #{halving}; pass --exhaustive SWEEP_ID")
    return exhaustive, halving


def fmt_us(us):
    return "-" if us is None else f"{us:.2f} us"


def name(row):
    return row["variant"] + (f"{{{row['config_key']}}}" if row["config_key"] else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db")
    parser.add_argument("--exhaustive", type=int, help="id of the exhaustive sweep")
    parser.add_argument("--halving", type=int, help="id of the halving sweep")
    parser.add_argument("--within", type=float, default=0.05, help="largest slowdown of the halving winner (0.05)")
    parser.add_argument("--max-fraction", type=float, default=0.30,
                        help="largest fraction of supported candidates halving may measure fully (0.30)")
    args = parser.parse_args()

    db = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    exhaustive_id, halving_id = pick_sweeps(db, args)
    ex, hv = Sweep(db, exhaustive_id), Sweep(db, halving_id)
    if ex.row["device_key"] != hv.row["device_key"]:
        print(f"warning: the sweeps ran on different devices ({ex.row['device_key']} vs {hv.row['device_key']})")

    keys = [k for k in hv.problems if hv.strategy(k) == "halving" and ex.strategy(k) == "exhaustive"]
    if not keys:
        fail(f"no problem was swept exhaustively in #{ex.id} and with halving in #{hv.id}")

    def wall(sweep):
        s = sweep.seconds()
        return "unfinished" if s is None else f"{s:.1f} s"

    print(f"# Successive halving (sweep #{hv.id}, {wall(hv)}) vs exhaustive (sweep #{ex.id}, {wall(ex)})\n")
    print(f"Target: halving winner within {args.within:.0%} of the exhaustive winner, at most "
          f"{args.max_fraction:.0%} of the supported candidates fully measured. The halving winner's time is "
          "the exhaustive sweep's measurement of the same candidate (the halving sweep's own in brackets), so "
          "that run-to-run drift does not count. Samples: every sample each sweep timed, races included.\n")
    print("| problem | supported | exhaustive: measured | halving: measured / raced | full fraction | samples "
          "(halving / exhaustive) | exhaustive winner | halving winner | slower by | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    misses = 0
    for key in keys:
        e, h = ex.summary(key), hv.summary(key)
        supported = max(e["supported"], h["supported"])
        fraction = h["full"] / supported if supported else 0.0
        sample_ratio = h["samples"] / e["samples"] if e["samples"] else float("nan")
        notes = []
        if e["budget_cut"]:
            notes.append("exhaustive sweep cut by its budget")
        if not h["samples_exact"]:
            notes.append("race samples partly unknown (resumed)")
        if e["winner"] is None or h["winner"] is None:
            verdict, slower, hw_text = "no winner", None, fmt_us(h["winner"]["median_us"] if h["winner"] else None)
        else:
            h_key = (h["winner"]["variant"], h["winner"]["config_key"])
            own = h["winner"]["median_us"]
            same_run = e["medians"].get(h_key)
            compared = same_run if same_run is not None else own
            if same_run is None:
                notes.append("halving winner not measured by the exhaustive sweep: its own time compared")
            slower = compared / e["winner"]["median_us"] - 1
            hw_text = f"{name(h['winner'])} {fmt_us(compared)} [{fmt_us(own)}]"
            ok = slower <= args.within and fraction <= args.max_fraction
            verdict = "pass" if ok else "MISS"
        misses += verdict != "pass"
        ew = e["winner"]
        ew_text = f"{name(ew)} {fmt_us(ew['median_us'])}" if ew else "-"
        print(f"| {key} | {supported} | {e['full']} | {h['full']} / {h['raced']} | {fraction:.1%} | "
              f"{'' if h['samples_exact'] else '>= '}{h['samples']} / {e['samples']} ({sample_ratio:.0%}) | "
              f"{ew_text} | {hw_text} | {'-' if slower is None else f'{slower:+.1%}'} | {verdict}"
              f"{' (' + '; '.join(notes) + ')' if notes else ''} |")
    print(f"\n{len(keys) - misses} of {len(keys)} problems meet the target.")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
