#!/usr/bin/env python3
"""What a user would pick instead: torch.softmax on the same GPU, timed like shapetune times
(CUDA events around one launch, L2 evicted before each sample by reading a buffer three times
its size, median of many samples). Prints one line per shape; --json writes the numbers."""
import argparse
import json
import statistics
import sys

import torch

SHAPES = [(1024, 1000), (4096, 4096), (65536, 1024), (8192, 32000), (16384, 128)]
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def time_us(fn, flush, samples=50):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for s, e in zip(starts, stops):
        flush.sum()  # a read-only eviction: no dirty lines left for the timed kernel to write back
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1000 for s, e in zip(starts, stops))
    return statistics.median(times), times[len(times) // 10], times[len(times) * 9 // 10]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(3 * props.L2_cache_size // 4, dtype=torch.float32, device="cuda").normal_()
    results = []
    print(f"torch {torch.__version__} on {props.name}")
    print(f"{'op':<8} {'shape':<12} {'dtype':<5} {'median':>10} {'p10':>10} {'p90':>10} {'achieved':>11}")
    for rows, cols in SHAPES:
        for name, dtype in DTYPES.items():
            x = torch.randn(rows, cols, device="cuda", dtype=dtype) * 4
            median, p10, p90 = time_us(lambda: torch.softmax(x, dim=-1), flush)
            tbps = 2 * x.numel() * x.element_size() / (median * 1e-6) / 1e12
            results.append({"op": "torch.softmax", "rows": rows, "cols": cols, "dtype": name, "median_us": median,
                            "p10_us": p10, "p90_us": p90, "tb_per_s": tbps})
            print(f"{'softmax':<8} {f'{rows}x{cols}':<12} {name:<5} {median:>8.2f}us {p10:>8.2f}us {p90:>8.2f}us "
                  f"{tbps:>7.2f} TB/s")
            del x
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": props.name, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
