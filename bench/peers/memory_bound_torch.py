#!/usr/bin/env python3
"""PyTorch on the same GPU, for the memory-bound family: F.layer_norm, residual add + layer_norm
(eager and torch.compile), fused Adam(W), GELU, and cross-entropy forward+backward. Timed like
shapetune times: CUDA events around one call, L2 evicted before each sample by reading a buffer
three times its size, median of many samples. --json writes the numbers."""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

from peer_timing import l2_flush_buffer, time_us


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write results here")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to start)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    flush = l2_flush_buffer()
    results = []
    print(f"torch {torch.__version__} on {props.name}")

    def report(op, shape, dtype, timing, bytes_moved, note=""):
        median, p10, p90 = timing
        tbps = bytes_moved / (median * 1e-6) / 1e12
        results.append({"op": op, "shape": shape, "dtype": dtype, "median_us": median, "p10_us": p10, "p90_us": p90,
                        "bytes": bytes_moved, "tb_per_s": tbps, "note": note})
        print(f"{op:<28} {shape:<22} {dtype:<5} {median:>9.1f} us  {tbps:5.2f} TB/s  {note}")

    for rows, cols, dtype in [(8192, 1024, torch.float32), (65536, 4096, torch.float32), (65536, 4096, torch.bfloat16)]:
        name = str(dtype).split(".")[-1]
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        r = torch.randn_like(x)
        w = torch.randn(cols, device="cuda", dtype=dtype)
        b = torch.randn_like(w)
        size = x.element_size() * x.numel()
        report("F.layer_norm", f"{rows}x{cols}", name, time_us(lambda: F.layer_norm(x, (cols,), w, b), flush),
               2 * size)

        def residual(x, r):
            h = x + r
            return h, F.layer_norm(h, (cols,), w, b)

        report("residual+layer_norm eager", f"{rows}x{cols}", name, time_us(lambda: residual(x, r), flush), 4 * size,
               "h and y written")
        if not args.no_compile:
            compiled = torch.compile(residual)
            report("residual+layer_norm compile", f"{rows}x{cols}", name, time_us(lambda: compiled(x, r), flush),
                   4 * size, "h and y written")
        del x, r

    for n in [16_777_216, 134_217_728]:
        p = torch.nn.Parameter(torch.randn(n, device="cuda"))
        p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, fused=True)
        opt.step()  # creates the state
        report("AdamW fused", f"n={n}", "f32", time_us(opt.step, flush), 28 * n, "7 accesses/param")
        del p, opt

    x = torch.randn(4_194_304, device="cuda")
    report("F.gelu", "n=4194304", "f32", time_us(lambda: F.gelu(x), flush), 8 * x.numel())
    x = torch.randn(268_435_456, device="cuda")
    report("F.gelu", "n=268435456", "f32", time_us(lambda: F.gelu(x), flush), 8 * x.numel())
    del x

    for rows, classes in [(4096, 32000), (8192, 32000)]:
        logits = torch.randn(rows, classes, device="cuda", requires_grad=True)
        labels = torch.randint(0, classes, (rows,), device="cuda")

        def xent():
            loss = F.cross_entropy(logits, labels)
            (grad,) = torch.autograd.grad(loss, logits)
            return loss, grad

        report("cross_entropy fwd+bwd", f"{rows}x{classes}", "f32", time_us(xent, flush), 8 * rows * classes)
        del logits

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": props.name, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
