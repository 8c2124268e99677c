#!/usr/bin/env python3
"""PyTorch on the same GPU, for the attention family: F.scaled_dot_product_attention over split
q, k, v [B, H, S, hd] (torch.randn * 1.15, about the spread of shapetune's uniform [-2, 2]
inputs), causal, in f16 and bf16, with PyTorch's own choice of backend ("default") and with each
backend forced (cuDNN, FlashAttention-2 "flash", "efficient"); a backend that refuses a shape is
listed as skipped with its reason. Timed like shapetune times: CUDA events around one call, L2
evicted before each sample by reading a buffer three times its size, median of many samples
(p10 and p90 beside it). FLOPs are counted as 4 B H S^2 hd / 2 for the causal mask (the
convention of FlashAttention's published rates and of shapetune's cost model). Prints one line
per result; --json writes the numbers."""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peer_timing import l2_flush_buffer, time_us

SHAPES = [(4, 16, 8192, 128), (8, 16, 2048, 64), (1, 16, 100000, 64), (64, 4, 128, 32)]
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
BACKENDS = {"default": None, "cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def parse_shapes(text):
    shapes = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        parts = [int(p) for p in item.split(",")]
        if len(parts) != 4 or min(parts) < 1:
            raise argparse.ArgumentTypeError(f"shape {item!r}: want B,H,S,hd, all positive")
        shapes.append(tuple(parts))
    if not shapes:
        raise argparse.ArgumentTypeError("no shapes given")
    return shapes


def measure(B, H, S, hd, dtype, backend, flush, samples):
    q, k, v = (torch.randn(B, H, S, hd, device="cuda", dtype=dtype) * 1.15 for _ in range(3))

    def call():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    if BACKENDS[backend] is None:
        return time_us(call, flush, samples)
    with sdpa_kernel(BACKENDS[backend]):
        return time_us(call, flush, samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write results here")
    parser.add_argument("--shapes", type=parse_shapes, default=SHAPES, help="B,H,S,hd;B,H,S,hd (default: the built-in set)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="default,cudnn,flash,efficient (default: all)")
    parser.add_argument("--samples", type=int, default=30, help="timed samples per result (default 30)")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in BACKENDS:
            parser.error(f"backend {b!r}: want one of {','.join(BACKENDS)}")
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    flush = l2_flush_buffer()
    results, skipped = [], []
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()} on {props.name}")
    print(f"{'op':<22} {'B':>5} {'H':>3} {'S':>7} {'hd':>4} {'dtype':<5} {'median':>11} {'p10':>11} {'p90':>11} "
          f"{'achieved':>14}")
    for B, H, S, hd in args.shapes:
        for dname, dtype in DTYPES.items():
            for backend in backends:
                op = f"SDPA causal {backend}"
                head = f"{op:<22} {B:>5} {H:>3} {S:>7} {hd:>4} {dname:<5}"
                try:
                    median, p10, p90 = measure(B, H, S, hd, dtype, backend, flush, args.samples)
                except Exception as e:  # a backend refusing a shape, out of memory: skip it, keep the rest
                    lines = str(e).strip().splitlines()
                    error = f"{type(e).__name__}: {lines[0] if lines else ''}"
                    skipped.append({"op": op, "B": B, "H": H, "S": S, "hd": hd, "dtype": dname, "error": error})
                    print(f"{head} skipped: {error[:100]}", flush=True)
                    torch.cuda.empty_cache()
                    continue
                torch.cuda.empty_cache()
                flops = 4 * B * H * S * S * hd / 2
                tflops = flops / (median * 1e-6) / 1e12
                results.append({"op": op, "B": B, "H": H, "S": S, "hd": hd, "dtype": dname, "median_us": median,
                                "p10_us": p10, "p90_us": p90, "flops": flops, "tflops": tflops})
                print(f"{head} {median:>9.1f}us {p10:>9.1f}us {p90:>9.1f}us {tflops:>8.1f} TFLOP/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "device": props.name,
                       "results": results, "skipped": skipped}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
