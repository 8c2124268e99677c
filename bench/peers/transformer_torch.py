#!/usr/bin/env python3
"""The TechJam causal Transformer in plain PyTorch, on the weights and input shapetune's runner used.

    shapetune run transformer --case 1 --dtype f16 --save-weights w.st --save-input x.st -o y.st
    bench/peers/transformer_torch.py --weights w.st --input x.st --heads 4 --dtype f16 --compare y.st --json peers.json

Written from the model description (pre-LN: a = LN1(x); x = x + out(attn(qkv(a))); b = LN2(x);
x = x + fc2(GELU_erf(fc1(b))); final LN), with module names equal to the runner's parameter names,
so the runner's safetensors load with load_state_dict. Attention is
F.scaled_dot_product_attention(is_causal=True), what a PyTorch user reaches for (its backends
materialise no S x S scores). An f32 model uses TF32 products (matmul precision "high").

Prints the eager (and, with --compile, torch.compile) forward's median time over CUDA events, and
with --compare the runner's output checked under the TechJam rule: every element within 0.002
absolute or 2% relative of PyTorch's, both finite. Exit 1 if that check fails.
"""
import argparse
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
FILE_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    """The tensors of a safetensors file (F32, F16, BF16), on the CPU."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=FILE_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(B, S, D))


class FeedForward(nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))  # the erf form (approximate="none")


class Layer(nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim, eps=1e-5)
        self.ffn = FeedForward(dim, ffn)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, dim, heads, ffn, layers):
        super().__init__()
        self.layers = nn.ModuleList([Layer(dim, heads, ffn) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.ln_f(x)


def median_us(fn, x, warmup, iterations):
    for _ in range(warmup):
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--dtype", choices=DTYPES, default="f16")
    p.add_argument("--compare", help="the runner's output (safetensors, tensor y)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile(model)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--label", default="", help="a name for this run in the JSON (e.g. case 1 f16)")
    p.add_argument("--json", help="append this run's results to a JSON list here")
    args = p.parse_args()

    torch.set_float32_matmul_precision("high")
    dtype = DTYPES[args.dtype]
    state = read_safetensors(args.weights)
    x = read_safetensors(args.input)["x"].to("cuda", dtype)
    layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
    dim = state["ln_f.weight"].shape[0]
    ffn = state["layers.0.ffn.fc1.weight"].shape[0]
    model = Transformer(dim, args.heads, ffn, layers).to("cuda", dtype).eval()
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()})

    result = {"label": args.label, "dtype": args.dtype, "shape": list(x.shape), "heads": args.heads,
              "layers": layers, "ffn": ffn}
    with torch.inference_mode():
        y = model(x)
        result["eager_us"] = median_us(model, x, args.warmup, args.iterations)
        if args.compile:
            compiled = torch.compile(model)
            result["compiled_us"] = median_us(compiled, x, args.warmup, args.iterations)
    ok = True
    if args.compare:
        ours = read_safetensors(args.compare)["y"].to("cuda", torch.float32)
        ref = y.float()
        err = (ours - ref).abs()
        within = (err <= 0.002) | (err <= 0.02 * ref.abs())
        within &= torch.isfinite(ours) & torch.isfinite(ref)
        failing = int((~within).sum())
        result.update({"max_abs_error": float(err.max()), "elements": ours.numel(), "failing": failing})
        ok = failing == 0
    print(json.dumps(result))
    if args.json:
        try:
            with open(args.json) as f:
                runs = json.load(f)
        except FileNotFoundError:
            runs = []
        runs.append(result)
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
