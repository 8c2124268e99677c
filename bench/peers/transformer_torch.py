#!/usr/bin/env python3
"""The TechJam causal Transformer in plain PyTorch, on the weights and input shapetune's runner used.

    shapetune run transformer --case 1 --dtype f16 --save-weights w.st --save-input x.st -o y.st
    bench/peers/transformer_torch.py --weights w.st --input x.st --heads 4 --dtype f16 --compare y.st --json peers.json

Written from the model description (pre-LN: a = LN1(x); x = x + out(attn(qkv(a))); b = LN2(x);
x = x + fc2(GELU_erf(fc1(b))); final LN), with module names equal to the runner's parameter names,
so the runner's safetensors load with load_state_dict. Attention is
F.scaled_dot_product_attention(is_causal=True), what a PyTorch user reaches for (its backends
materialise no S x S scores). An f32 model uses TF32 products (matmul precision "high").

Where the input file holds valid_lengths (I32 [B], what the runner writes with --padding-ratio),
the valid-token mask of techjam-cases.md applies: keys at positions >= L_b get -inf (a boolean
attn_mask, causal and key padding together, in place of is_causal), and the attention output,
each layer's output and the final output are zeroed at those positions. The check then also
requires the runner's output to be exactly 0 there.

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
FILE_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32}


def read_safetensors(path):
    """The tensors of a safetensors file (F32, F16, BF16, I32), on the CPU."""
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


def zero_invalid(x, valid):
    """x [B, S, D] with the positions where valid [B, S] is False set to 0 (x itself without a mask)."""
    return x if valid is None else x.masked_fill(~valid[..., None], 0)


def valid_mask(lengths, seq):
    """[B, S] booleans, True at positions below each row's valid length."""
    return torch.arange(seq, device=lengths.device)[None, :] < lengths[:, None]


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, valid=None):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        if valid is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(o.transpose(1, 2).reshape(B, S, D))
        # True where query i may read key j: j <= i and j valid. Key 0 is always valid (L_b >= 1),
        # so no row is all -inf.
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()
        allowed = causal & valid[:, None, None, :]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return zero_invalid(self.out(o.transpose(1, 2).reshape(B, S, D)), valid)


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

    def forward(self, x, valid=None):
        x = x + self.attn(self.ln1(x), valid)
        return zero_invalid(x + self.ffn(self.ln2(x)), valid)


class Transformer(nn.Module):
    def __init__(self, dim, heads, ffn, layers):
        super().__init__()
        self.layers = nn.ModuleList([Layer(dim, heads, ffn) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x, valid=None):
        for layer in self.layers:
            x = layer(x, valid)
        return zero_invalid(self.ln_f(x), valid)


def median_us(fn, args, warmup, iterations):
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
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
    inputs = read_safetensors(args.input)
    x = inputs["x"].to("cuda", dtype)
    lengths = inputs.get("valid_lengths")
    if lengths is not None:
        lengths = lengths.to("cuda", torch.int64)
        if lengths.shape != (x.shape[0],) or int(lengths.min()) < 1 or int(lengths.max()) > x.shape[1]:
            sys.exit(f"{args.input}: valid_lengths must be I32 [B] with values in [1, S]")
    # Lengths all S are no mask, as the runner takes them (its unmasked forward).
    valid = None if lengths is None or bool((lengths == x.shape[1]).all()) else valid_mask(lengths, x.shape[1])
    layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
    dim = state["ln_f.weight"].shape[0]
    ffn = state["layers.0.ffn.fc1.weight"].shape[0]
    model = Transformer(dim, args.heads, ffn, layers).to("cuda", dtype).eval()
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()})

    result = {"label": args.label, "dtype": args.dtype, "shape": list(x.shape), "heads": args.heads,
              "layers": layers, "ffn": ffn,
              "padding": 0.0 if valid is None else 1 - float(valid.float().mean())}
    with torch.inference_mode():
        y = model(x, valid)
        result["eager_us"] = median_us(model, (x, valid), args.warmup, args.iterations)
        if args.compile:
            compiled = torch.compile(model)
            result["compiled_us"] = median_us(compiled, (x, valid), args.warmup, args.iterations)
    ok = True
    if args.compare:
        compared = read_safetensors(args.compare)
        ours = compared["y"].to("cuda", torch.float32)
        theirs_lengths = compared.get("valid_lengths")
        if (theirs_lengths is None) != (lengths is None) or (
                lengths is not None and not torch.equal(theirs_lengths.to("cuda", torch.int64), lengths)):
            sys.exit(f"{args.compare} and {args.input} disagree on valid_lengths")
        ref = y.float()
        err = (ours - ref).abs()
        within = (err <= 0.002) | (err <= 0.02 * ref.abs())
        within &= torch.isfinite(ours) & torch.isfinite(ref)
        failing = int((~within).sum())
        # Past each row's length the output is exactly 0, not merely within the rule of it.
        nonzero_padding = 0 if valid is None else int((ours[~valid] != 0).sum())
        result.update({"max_abs_error": float(err.max()), "elements": ours.numel(), "failing": failing,
                       "nonzero_padding": nonzero_padding})
        ok = failing == 0 and nonzero_padding == 0
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
