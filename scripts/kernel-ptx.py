#!/usr/bin/env python3
"""PTX of every kernel the build compiles, one file per (architecture, function), normalised so
that two trees can be compared with `diff -r`: a refactor whose PTX is unchanged cannot change a
kernel's speed.

    scripts/kernel-ptx.py build /tmp/ptx-before      # on the old tree
    scripts/kernel-ptx.py build /tmp/ptx-after       # on the new tree
    scripts/kernel-ptx.py --compare /tmp/ptx-before /tmp/ptx-after

Reads BUILD/compile_commands.json, reruns each .cu's nvcc command with --ptx for every
architecture it names, and splits the output at .entry/.func. Normalised away: the per-file hash
in anonymous-namespace names, label numbers, .file/.loc lines, and comments. Functions are named by their mangled
name, so a kernel moved to another file compares with its old self; --compare also pairs a
renamed function (another namespace) with the old one whose body is the same but for the name.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def ptx_commands(entry):
    args = shlex.split(entry["command"])
    archs = []
    kept = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a.startswith("--generate-code="):
            archs.append(re.search(r"arch=(compute_\w+)", a).group(1))
            continue
        if a == "-o" or a == "-c":
            skip = a == "-o"
            continue
        if a.startswith("-forward-unknown") or a.startswith("-Xcompiler"):
            continue
        kept.append(a)
    return [(arch, kept + ["--ptx", f"-arch={arch}"]) for arch in archs]


def anonymous_namespaces(text):
    """Mangled <length>_GLOBAL__N__<file hash>... and <length>_INTERNAL_... names (their suffix
    differs from one compilation to the next), their length prefix read, as 5_ANON."""
    out, pos = [], 0
    for m in re.finditer(r"(\d+)(_GLOBAL__N__|_INTERNAL_)", text):
        if m.start() < pos:
            continue
        length = int(m.group(1))
        out.append(text[pos:m.start()] + "5_ANON")
        pos = m.start(2) + length
    return "".join(out) + text[pos:]


def normalise(text):
    text = anonymous_namespaces(text)
    text = re.sub(r"\$L__BB\d+_", "$L__BB_", text)  # numbered by the function's place in its file
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(".file") or s.startswith(".loc") or s.startswith("//"):
            continue
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def split_functions(text):
    """(name, body) per .entry / .func; the header before the first is dropped."""
    pieces = re.split(r"(?m)^(?=(?:\.visible |\.weak |\.extern )?\.(?:entry|func)\b)", text)
    out = []
    for p in pieces:
        m = re.match(r"(?:\.visible |\.weak |\.extern )?\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", p)
        if m:
            out.append((m.group(2), p.rstrip() + "\n"))
    return out


def compare(before, after):
    """Prints what differs; exit status 1 when any function's PTX changed or has no counterpart."""
    def load(root):
        out = {}
        for arch in sorted(os.listdir(root)):
            for name in os.listdir(os.path.join(root, arch)):
                with open(os.path.join(root, arch, name)) as f:
                    out[(arch, name)] = f.read()
        return out

    def anonymous(name, body):
        return body.replace(name, "SELF")

    def instructions(body):
        """The body as a multiset of instructions with register numbers erased: nvcc is not
        deterministic for some kernels (the same source compiled twice numbers and orders its
        register initialisations differently), so identical text is too strict a test."""
        lines = [re.sub(r"%([a-z]+)\d+", r"%\1", l.strip()) for l in body.splitlines()]
        return sorted(l for l in lines if l and not l.startswith(".reg"))

    old, new = load(before), load(after)
    differing = [k for k in old if k in new and old[k] != new[k]]
    changed = [k for k in differing if instructions(old[k]) != instructions(new[k])]
    equivalent = len(differing) - len(changed)
    removed = {k: anonymous(k[1], old[k]) for k in old if k not in new}
    added = {k: anonymous(k[1], new[k]) for k in new if k not in old}
    renamed = []
    for k, body in list(added.items()):
        match = next((r for r, b in removed.items() if r[0] == k[0] and b == body), None)
        if match:
            renamed.append((match, k))
            del removed[match]
            del added[k]
    print(f"{len(old)} functions before, {len(new)} after: "
          f"{len(old) - len(differing) - len(removed) - len(renamed)} identical, {equivalent} with the same "
          f"instructions in another order or registers, {len(renamed)} renamed with identical bodies, "
          f"{len(changed)} changed, {len(removed)} removed, {len(added)} added")
    for arch, name in sorted(changed):
        print(f"changed  {arch} {name}")
    for arch, name in sorted(removed):
        print(f"removed  {arch} {name}")
    for arch, name in sorted(added):
        print(f"added    {arch} {name}")
    return 1 if changed or removed or added else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build, out_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if e["file"].endswith(".cu") and "/tests/" not in e["file"]]
    jobs = [(e, arch, cmd) for e in entries for arch, cmd in ptx_commands(e)]

    def run(job):
        e, arch, cmd = job
        r = subprocess.run(cmd + ["-o", "-"], cwd=e["directory"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"nvcc failed for {e['file']} ({arch}):\n{r.stderr}")
        return arch, split_functions(normalise(r.stdout))

    os.makedirs(out_dir, exist_ok=True)
    count = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for arch, functions in pool.map(run, jobs):
            folder = os.path.join(out_dir, arch)
            os.makedirs(folder, exist_ok=True)
            for name, body in functions:
                with open(os.path.join(folder, name[:200]), "w") as f:
                    f.write(body)
                count += 1
    print(f"{count} functions from {len(entries)} files into {out_dir}")


if __name__ == "__main__":
    main()
