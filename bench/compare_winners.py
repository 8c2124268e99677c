#!/usr/bin/env python3
"""Compare the dispatch tables of two shapetune databases problem by problem, under the tie rule.

    bench/compare_winners.py REFERENCE.db OTHER.db [--dump-hash]

For every (device, problem) of REFERENCE: "same" when OTHER chose the same variant and config;
"tie" when it chose another candidate but, in either database, the two winners' medians are
within the noise of each other (the rule `sweep` uses to flag a tie: relative margin <=
max(1%, the sum of both medians' relative 95% CI half-widths)); "differs" otherwise; "missing"
when OTHER has no winner for it. Problems only in OTHER are listed too. Exit 0 when every
problem is same or tie and none is missing on either side, else 1.

--dump-hash prints a SHA-256 of every row of every table of each database instead (to show
that a second merge changed nothing). Uses only Python's standard library (sqlite3).
"""
import hashlib
import sqlite3
import sys

NOISE_FLOOR = 0.01  # tuner/choose.hpp kNoiseFloorRel


def connect(path):
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def dump_hash(path):
    db = connect(path)
    h = hashlib.sha256()
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    for table in tables:
        h.update(table.encode())
        for row in sorted(db.execute(f"SELECT * FROM {table}"), key=repr):
            h.update(repr(row).encode())
    return h.hexdigest()


def winners(db):
    rows = db.execute("SELECT device_key, problem_key, variant, config_key, median_us, median_ci_rel, sweep_id FROM winners")
    return {(r[0], r[1]): {"choice": f"{r[2]}{{{r[3]}}}", "variant": r[2], "config": r[3], "median": r[4],
                           "ci": r[5] or 0.0, "sweep": r[6]} for r in rows}


def candidate(db, sweep, problem, variant, config):
    """The full (not race) measurement of one candidate in the sweep that chose the winner."""
    row = db.execute("SELECT median_us, median_ci_rel FROM candidates WHERE sweep_id=? AND problem_key=? AND variant=? "
                     "AND config_key=? AND status='ok' AND median_us IS NOT NULL AND stop_reason NOT LIKE 'halving rung%'",
                     (sweep, problem, variant, config)).fetchone()
    return (row[0], row[1] or 0.0) if row else None


def within_noise(db, key, mine, theirs):
    """In this database's sweep, is the other database's winner within the noise of this one's?"""
    other = candidate(db, mine["sweep"], key[1], theirs["variant"], theirs["config"])
    if other is None:
        return None
    margin = other[0] / mine["median"] - 1
    return margin, margin <= max(NOISE_FLOOR, mine["ci"] + other[1])


def main():
    args = sys.argv[1:]
    if "--dump-hash" in args:
        for path in [a for a in args if a != "--dump-hash"]:
            print(dump_hash(path), path)
        return 0
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ref_db, other_db = connect(args[0]), connect(args[1])
    ref, other = winners(ref_db), winners(other_db)
    counts = {"same": 0, "tie": 0, "differs": 0, "missing": 0, "only in other": 0}
    lines = []
    for key in sorted(ref):
        a = ref[key]
        b = other.get(key)
        if b is None:
            verdict, detail = "missing", "no winner in " + args[1]
        elif a["choice"] == b["choice"]:
            verdict = "same"
            detail = f"{a['choice']}: {a['median']:.2f} vs {b['median']:.2f} us ({b['median'] / a['median'] - 1:+.1%})"
        else:
            in_ref = within_noise(ref_db, key, a, b)
            in_other = within_noise(other_db, key, b, a)
            tie = any(x and x[1] for x in (in_ref, in_other))
            verdict = "tie" if tie else "differs"
            margins = ", ".join(f"{name} margin {x[0]:+.1%}" for name, x in (("reference", in_ref), ("other", in_other)) if x)
            detail = f"{a['choice']} {a['median']:.2f} us vs {b['choice']} {b['median']:.2f} us ({margins or 'not measured in the other'})"
        counts[verdict] += 1
        lines.append(f"{verdict:8s} {key[1]}  {detail}")
    for key in sorted(set(other) - set(ref)):
        counts["only in other"] += 1
        lines.append(f"{'only in other':8s} {key[1]}  {other[key]['choice']}")
    print("\n".join(lines))
    print(f"{args[0]} vs {args[1]}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0 if counts["differs"] == counts["missing"] == counts["only in other"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
