#!/usr/bin/env python3
"""PyTorch on the same GPU, for the recurrent family: nn.LSTM(D, H) and nn.GRU(D, H), one layer,
input [T, N, D] (batch_first=False), random h0 (and c0), PyTorch's default initialisation, the
input torch.randn * 0.5. Forward alone (module in eval mode, under torch.no_grad()) and forward +
backward (input and weights requiring grad, loss = y.sum() + hT.sum() (+ cT.sum()), forward, loss
and backward in one timed region; grads set to None outside it). cuDNN stays enabled, as a user
would have it, so PyTorch takes its cuDNN RNN path where it accepts the dtype; each result says
which path ran ("backend", from the autograd node of one untimed call).

TF32 is part of the dtype, as in shapetune: f32 runs with TF32 forbidden
(torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32 False: IEEE fp32
products, cuDNN's CUDNN_FMA_MATH), tf32 with both True (fp32 tensors, TF32 products: what
nn.LSTM/nn.GRU in float32 run by default, cuDNN's flag being True by default), so f32 figures are
compared with shapetune's f32 problems and tf32 ones with its tf32 problems. f16 and bf16 run at
PyTorch's defaults (cuDNN's flag True, which for bf16 picks tensor-op math over FMA; the matmul
flag False). Each result records the flags it ran under, read back after setting them (with
cuDNN's RNN fp32_precision where this PyTorch has that API); a dtype whose flags do not read back
as set is skipped, never mislabelled.

Timed like shapetune times: CUDA events around one call, L2 evicted before each sample by reading
a buffer three times its size, median of many samples (p10 and p90 beside it). FLOPs are the
forward's GEMMs, T * (2*N*D*G*H + 2*N*H*G*H) with G = 4 gates for the LSTM and 3 for the GRU,
three times that for forward+backward. Prints one line per result; --json writes the numbers."""
import argparse
import json
import sys
import warnings

import torch
import torch.nn as nn

from peer_timing import l2_flush_buffer, time_us

SHAPES = [(64, 64, 128, 128), (64, 64, 128, 256), (32, 32, 128, 128), (128, 64, 256, 512), (1000, 1, 128, 256),
          (1000, 4, 128, 512), (1000, 8, 128, 1024), (64, 64, 128, 1024)]
# name -> (torch dtype, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
DTYPES = {"f32": (torch.float32, False, False), "tf32": (torch.float32, True, True),
          "f16": (torch.float16, True, False), "bf16": (torch.bfloat16, True, False)}
CELLS = {"LSTM": (nn.LSTM, 4), "GRU": (nn.GRU, 3)}


def parse_shapes(text):
    shapes = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        parts = [int(p) for p in item.split(",")]
        if len(parts) != 4 or min(parts) < 1:
            raise argparse.ArgumentTypeError(f"shape {item!r}: want T,N,D,H, all positive")
        shapes.append(tuple(parts))
    if not shapes:
        raise argparse.ArgumentTypeError("no shapes given")
    return shapes


def parse_dtypes(text):
    names = [d.strip() for d in text.split(",") if d.strip()]
    for d in names:
        if d not in DTYPES:
            raise argparse.ArgumentTypeError(f"dtype {d!r}: want one of {','.join(DTYPES)}")
    if not names:
        raise argparse.ArgumentTypeError("no dtypes given")
    return names


def tf32_settings():
    """What TF32 is allowed to do here (the cuDNN flag governs cuDNN's RNN math for f32)."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, read in [("cudnn_allow_tf32", lambda: bool(torch.backends.cudnn.allow_tf32)),
                          ("matmul_allow_tf32", lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
                          ("cudnn_rnn_fp32_precision", lambda: str(torch.backends.cudnn.rnn.fp32_precision))]:
            try:
                out[key] = read()
            except AttributeError:  # a PyTorch before the fp32_precision API (2.9)
                pass
            except Exception as e:  # the newer fp32_precision API can refuse the legacy query
                out[key] = repr(e)
    return out


def set_tf32(cudnn, matmul):
    """Allow or forbid TF32 in cuDNN (its RNNs) and in cuBLAS (torch.matmul: only PyTorch's native RNN
    path would use it); returns the settings as read back, or raises RuntimeError where they do not
    read back as set. From PyTorch 2.9 the legacy cuDNN flag sets cuDNN's RNN fp32_precision to
    "tf32" when True and "none" (no TF32 for the RNN) when False."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cudnn.allow_tf32 = cudnn
        torch.backends.cuda.matmul.allow_tf32 = matmul
    settings = tf32_settings()
    wrong = {k: settings.get(k) for k, v in [("cudnn_allow_tf32", cudnn), ("matmul_allow_tf32", matmul)]
             if settings.get(k) is not v}
    rnn = settings.get("cudnn_rnn_fp32_precision")
    if rnn is not None and (rnn == "tf32") != cudnn:
        wrong["cudnn_rnn_fp32_precision"] = rnn
    if wrong:
        raise RuntimeError(f"cudnn.allow_tf32={cudnn}, matmul.allow_tf32={matmul} set but read back as {wrong}")
    return settings


def flops_of(cell, T, N, D, H, backward):
    gates = CELLS[cell][1]
    forward = T * (2 * N * D * gates * H + 2 * N * H * gates * H)
    return 3 * forward if backward else forward


def measure(cell, T, N, D, H, dtype, backward, flush, samples):
    """Build the module and tensors, time one configuration; everything is freed on return."""
    cls, _ = CELLS[cell]
    rnn = cls(D, H, num_layers=1, batch_first=False, device="cuda", dtype=dtype)
    rnn.flatten_parameters()
    x = (torch.randn(T, N, D, device="cuda", dtype=dtype) * 0.5).requires_grad_(backward)
    h0 = torch.randn(1, N, H, device="cuda", dtype=dtype) * 0.5
    hx = (h0, torch.randn(1, N, H, device="cuda", dtype=dtype) * 0.5) if cell == "LSTM" else h0

    def loss_of(out):
        y, h = out
        if cell == "LSTM":
            return y.sum() + h[0].sum() + h[1].sum()
        return y.sum() + h.sum()

    # Which path PyTorch takes: the autograd node of one untimed call (weights require grad).
    rnn.train(backward)
    with torch.enable_grad():
        node = rnn(x, hx)[0].grad_fn
    node_name = node.name() if node is not None else "none"
    backend = "cudnn" if "cudnn" in node_name.lower() else f"native ({node_name})"
    del node

    if backward:
        def step():
            loss_of(rnn(x, hx)).backward()

        def clear():
            rnn.zero_grad(set_to_none=True)
            x.grad = None

        timing = time_us(step, flush, samples, before=clear)
    else:
        with torch.no_grad():
            timing = time_us(lambda: rnn(x, hx), flush, samples)
    return timing, backend


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write results here")
    parser.add_argument("--shapes", type=parse_shapes, default=SHAPES, help="T,N,D,H;T,N,D,H (default: the built-in set)")
    parser.add_argument("--dtypes", type=parse_dtypes, default=list(DTYPES),
                        help="f32 (TF32 off), tf32 (TF32 on), f16, bf16 (default: all)")
    parser.add_argument("--no-backward", action="store_true", help="skip the forward+backward runs")
    parser.add_argument("--samples", type=int, default=30, help="timed samples per result (default 30)")
    args = parser.parse_args()
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    if not torch.backends.cudnn.enabled:
        print("warning: torch.backends.cudnn.enabled was False; enabling it (this measures PyTorch's cuDNN path)",
              file=sys.stderr)
        torch.backends.cudnn.enabled = True
    if not torch.backends.cudnn.is_available():
        print("warning: cuDNN is not available to this PyTorch; RNNs take the native path", file=sys.stderr)
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    flush = l2_flush_buffer()
    cudnn_version = torch.backends.cudnn.version()
    defaults = tf32_settings()  # PyTorch's own, before any dtype sets them
    results, skipped = [], []
    print(f"torch {torch.__version__}, cuDNN {cudnn_version} on {props.name}; defaults "
          + ", ".join(f"{k}={v}" for k, v in defaults.items()))
    print(f"{'op':<26} {'T':>5} {'N':>4} {'D':>5} {'H':>5} {'dtype':<5} {'median':>11} {'p10':>11} {'p90':>11} "
          f"{'a step':>10} {'achieved':>13}  backend")

    modes = [False] if args.no_backward else [False, True]
    for T, N, D, H in args.shapes:
        for dname in args.dtypes:
            torch_dtype, cudnn_tf32, matmul_tf32 = DTYPES[dname]
            try:
                tf32 = set_tf32(cudnn_tf32, matmul_tf32)
            except RuntimeError as e:
                print(f"{dname}: skipped: {e}", file=sys.stderr, flush=True)
                skipped.append({"op": "every op", "T": T, "N": N, "D": D, "H": H, "dtype": dname, "error": str(e)})
                continue
            for cell in CELLS:
                for backward in modes:
                    op = f"nn.{cell} forward" + ("+backward" if backward else "")
                    head = f"{op:<26} {T:>5} {N:>4} {D:>5} {H:>5} {dname:<5}"
                    error = None
                    try:
                        (median, p10, p90), backend = measure(cell, T, N, D, H, torch_dtype, backward, flush,
                                                              args.samples)
                    except Exception as e:  # out of memory, cuDNN refusing a shape: skip it, keep the rest
                        lines = str(e).strip().splitlines()
                        error = f"{type(e).__name__}: {lines[0] if lines else ''}"
                    try:  # the module and tensors died with measure's frame; hand their memory back
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                    except Exception as e:  # a sticky CUDA error: the later results will say so too
                        print(f"warning: after {op}: {type(e).__name__}: {e}", file=sys.stderr)
                    if error is not None:
                        skipped.append({"op": op, "T": T, "N": N, "D": D, "H": H, "dtype": dname, "error": error})
                        print(f"{head} skipped: {error}", flush=True)
                        continue
                    flops = flops_of(cell, T, N, D, H, backward)
                    tflops = flops / (median * 1e-6) / 1e12
                    results.append({"op": op, "T": T, "N": N, "D": D, "H": H, "dtype": dname, "median_us": median,
                                    "p10_us": p10, "p90_us": p90, "us_per_step": median / T, "flops": flops,
                                    "tflops": tflops, "backend": backend, **tf32})
                    print(f"{head} {median:>9.1f}us {p10:>9.1f}us {p90:>9.1f}us {median / T:>8.2f}us "
                          f"{tflops:>7.2f} TFLOP/s  {backend}", flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "cudnn": cudnn_version, "device": props.name,
                       "tf32_defaults": defaults, "results": results, "skipped": skipped}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
