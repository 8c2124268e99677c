#!/usr/bin/env python3
"""The TechJam causal Transformer in plain PyTorch, on the weights and input shapetune's runner used.

    shapetune run transformer --case 1 --dtype f16 --save-weights w.st --save-input x.st -o y.st
    bench/peers/transformer_torch.py --weights w.st --input x.st --heads 4 --dtype f16 --compare y.st \
        --compile --runner-us 246 --label "case 1 f16 trial 1" --json peers.json

Written from the model description (pre-LN: a = LN1(x); x = x + out(attn(qkv(a))); b = LN2(x);
x = x + fc2(GELU_erf(fc1(b))); final LN), with module names equal to the runner's parameter names,
so the runner's safetensors load with load_state_dict. Two attentions, on the same weights:

- the reference (techjam-cases.md): materialised scores, scores = (Q K^T) * hd^-0.5 in the model's
  type, masked with -inf, softmax in fp32 cast back to the model's type, then P V. The TechJam rule
  is judged against it. Where its [B, H, S, S] scores do not fit in memory (case 14) it is not run
  and the runner is compared with the SDPA model instead, which the JSON says ("compared_with");
- F.scaled_dot_product_attention(is_causal=True), what a PyTorch user reaches for (its backends
  materialise no S x S scores), eager and, with --compile, torch.compile(mode="reduce-overhead").

An f32 model uses TF32 products (matmul precision "high").

Where the input file holds valid_lengths (I32 [B], what the runner writes with --padding-ratio),
the valid-token mask of techjam-cases.md applies: keys at positions >= L_b get -inf (causal and key
padding together), and the attention output, each layer's output and the final output are zeroed at
those positions. The check then also requires the runner's output to be exactly 0 there.

With --compare, every element of the runner's output is checked under the TechJam rule (within
0.002 absolute or 2% relative of the reference, both finite), and so is the SDPA model's output
against the same reference ("sdpa_failing"): how close PyTorch's own fast path comes under the rule,
the floor a flash attention is measured against (in bf16 two correct computations that round at
other points differ by more than the rule allows; reports/cpu/2026-12-05-transformer-rounding-study).
Exit 1 if the runner's output fails the rule.

Prints one JSON object per trial (times are medians of CUDA-event-timed forwards after warm-up, in us;
--also adds trials compared without timing):
reference_us, sdpa_us, compiled_us (with --compile), runner_us (as given), failing, sdpa_failing,
failing_vs_sdpa, max_abs_error, elements, nonzero_padding; --json appends it to a list in a file.
With --f64-check N, where elements fail: f64_check (each element's index, ours, what it was compared
with, and the float64 model's value there), f64_ours_within and f64_ref_within (how many of them are
within the rule of the float64 value).
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
        self.materialise = False  # True: the reference's scores; False: SDPA

    def forward(self, x, valid=None):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        # True where query i may read key j: j <= i and j valid. Key 0 is always valid (L_b >= 1),
        # so no row is all -inf.
        allowed = torch.ones(S, S, dtype=torch.bool, device=x.device).tril() if self.materialise or valid is not None \
            else None
        if valid is not None:
            allowed = allowed & valid[:, None, None, :]
        if self.materialise:
            scores = (q @ k.transpose(-2, -1)) * (D // self.heads) ** -0.5
            scores = scores.masked_fill(~allowed, float("-inf"))
            o = torch.softmax(scores.float(), dim=-1).to(x.dtype) @ v
        elif valid is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
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

    def set_materialise(self, on):
        for layer in self.layers:
            layer.attn.materialise = on
        return self


def within_rule(ours, ref):
    """The TechJam rule, element by element: within 0.002 absolute or 2% of |ref|, both finite."""
    err = (ours - ref).abs()
    return ((err <= 0.002) | (err <= 0.02 * ref.abs())) & torch.isfinite(ours) & torch.isfinite(ref)


def rule_failures(ours, ref, first=0):
    """Elements of ours outside the TechJam rule around ref: their count, the largest error, and the
    (b, s, d) of up to `first` of them in order.

    One batch row at a time in fp32: case 14's output is 3.3e9 elements, whose fp32 difference
    alone would need 13 GB beside the models."""
    failing, worst, found = 0, 0.0, []
    for b, (o, r) in enumerate(zip(ours, ref)):
        o, r = o.float(), r.float()
        outside = ~within_rule(o, r)
        failing += int(outside.sum())
        worst = max(worst, float((o - r).abs().max()))
        if len(found) < first:
            found += [(b, s, d) for s, d in outside.nonzero()[:first - len(found)].tolist()]
    return failing, worst, found


@torch.no_grad()
def float64_outputs(model, x, valid, elements, chunk=256):
    """The model's output in float64 at each (b, s, d) of `elements`: the stored weights and input
    taken exactly, no intermediate rounding. Per batch row, every layer runs over positions 0..s
    (the last one needed) with the causal attention in chunks of `chunk` queries, so memory is
    O(chunk x S) whatever the sequence (case 14's S of 100000 included)."""
    heads = model.layers[0].attn.heads
    out = {}
    for b in sorted({e[0] for e in elements}):
        wanted = [e for e in elements if e[0] == b]
        length = int(valid[b].sum()) if valid is not None else x.shape[1]
        end = max(s for _, s, _ in wanted) + 1
        h = x[b, :end].double()
        S, D = h.shape
        hd = D // heads
        live = (torch.arange(S, device=h.device) < length)[:, None]
        w = lambda m: (m.weight.double(), None if m.bias is None else m.bias.double())
        ln = lambda m, v: F.layer_norm(v, (D,), *w(m), m.eps)
        lin = lambda m, v: F.linear(v, *w(m))
        for layer in model.layers:
            q, k, v = lin(layer.attn.qkv, ln(layer.ln1, h)).view(S, 3, heads, hd).permute(1, 2, 0, 3)
            o = torch.empty(heads, S, hd, dtype=torch.float64, device=h.device)
            keys = torch.arange(S, device=h.device)
            for q0 in range(0, S, chunk):
                q1 = min(q0 + chunk, S)
                scores = (q[:, q0:q1] @ k[:, :q1].transpose(-2, -1)) * hd ** -0.5
                allowed = (keys[None, :q1] <= torch.arange(q0, q1, device=h.device)[:, None]) & (keys[None, :q1] < length)
                o[:, q0:q1] = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v[:, :q1]
            h = h + lin(layer.attn.out, o.transpose(0, 1).reshape(S, D)) * live
            h = (h + lin(layer.ffn.fc2, F.gelu(lin(layer.ffn.fc1, ln(layer.ln2, h))))) * live
        y = ln(model.ln_f, h) * live
        for e in wanted:
            out[e] = float(y[e[1], e[2]])
    return out


def scores_bytes(x, heads):
    """The reference's attention memory: [B, H, S, S] scores in the model's type, fp32 softmax, P."""
    B, S, _ = x.shape
    return B * heads * S * S * (2 * x.element_size() + 4)


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


def run_trial(args, weights, input_file, compare, label, timing, runner_us):
    """One trial: the model on these weights and this input; returns (result dict, passed)."""
    dtype = DTYPES[args.dtype]
    state = read_safetensors(weights)
    inputs = read_safetensors(input_file)
    x = inputs["x"].to("cuda", dtype)
    lengths = inputs.get("valid_lengths")
    if lengths is not None:
        lengths = lengths.to("cuda", torch.int64)
        if lengths.shape != (x.shape[0],) or int(lengths.min()) < 1 or int(lengths.max()) > x.shape[1]:
            sys.exit(f"{input_file}: valid_lengths must be I32 [B] with values in [1, S]")
    # Lengths all S are no mask, as the runner takes them (its unmasked forward).
    valid = None if lengths is None or bool((lengths == x.shape[1]).all()) else valid_mask(lengths, x.shape[1])
    layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
    dim = state["ln_f.weight"].shape[0]
    ffn = state["layers.0.ffn.fc1.weight"].shape[0]
    model = Transformer(dim, args.heads, ffn, layers).to("cuda", dtype).eval()
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()})

    free, _ = torch.cuda.mem_get_info()
    need = scores_bytes(x, args.heads)
    reference_runs = need <= 0.5 * free
    result = {"label": label, "dtype": args.dtype, "shape": list(x.shape), "heads": args.heads,
              "layers": layers, "ffn": ffn, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "padding": 0.0 if valid is None else 1 - float(valid.float().mean()),
              "compared_with": "reference" if reference_runs else "sdpa"}
    if not reference_runs:
        result["reference_refused"] = f"needs {need / 2**30:.0f} GiB of scores; {free / 2**30:.0f} GiB free"
    if runner_us is not None:
        result["runner_us"] = runner_us
    with torch.inference_mode():
        y_sdpa = model.set_materialise(False)(x, valid)
        if timing:
            result["sdpa_us"] = median_us(model, (x, valid), args.warmup, args.iterations)
            if args.compile:
                compiled = torch.compile(model, mode="reduce-overhead")
                result["compiled_us"] = median_us(compiled, (x, valid), args.warmup, args.iterations)
        y_ref = None
        if reference_runs:
            y_ref = model.set_materialise(True)(x, valid)
            if timing:
                result["reference_us"] = median_us(model, (x, valid), args.warmup, args.iterations)
            model.set_materialise(False)
    ok = True
    if compare:
        compared = read_safetensors(compare)
        ours = compared["y"].to("cuda")  # in its stored type; rule_failures widens a row at a time
        theirs_lengths = compared.get("valid_lengths")
        if (theirs_lengths is None) != (lengths is None) or (
                lengths is not None and not torch.equal(theirs_lengths.to("cuda", torch.int64), lengths)):
            sys.exit(f"{compare} and {input_file} disagree on valid_lengths")
        if ours.shape != y_sdpa.shape:
            sys.exit(f"{compare}: y is {list(ours.shape)} where the model's output is {list(y_sdpa.shape)}")
        ref = y_ref if y_ref is not None else y_sdpa
        result["failing"], result["max_abs_error"], elements = rule_failures(ours, ref, args.f64_check)
        result["failing_vs_sdpa"], _, _ = rule_failures(ours, y_sdpa)
        if y_ref is not None:
            result["sdpa_failing"], result["sdpa_max_abs_error"], _ = rule_failures(y_sdpa, y_ref)
        result["elements"] = ours.numel()
        if elements:
            # Who is off at the failing elements: the runner, or what it was compared with.
            exact = float64_outputs(model, x, valid, elements)
            checked = [{"b": b, "s": s_, "d": d, "ours": float(ours[b, s_, d]), "ref": float(ref[b, s_, d]),
                        "f64": exact[(b, s_, d)]} for b, s_, d in elements]
            column = lambda name: torch.tensor([c[name] for c in checked], dtype=torch.float64)
            result["f64_check"] = checked
            result["f64_ours_within"] = int(within_rule(column("ours"), column("f64")).sum())
            result["f64_ref_within"] = int(within_rule(column("ref"), column("f64")).sum())
        # Past each row's length the output is exactly 0, not merely within the rule of it.
        result["nonzero_padding"] = 0 if valid is None else int((ours[~valid] != 0).sum())
        ok = result["failing"] == 0 and result["nonzero_padding"] == 0
    return result, ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--dtype", choices=DTYPES, default="f16")
    p.add_argument("--compare", help="the runner's output (safetensors, tensor y)")
    p.add_argument("--compile", action="store_true",
                   help='also time torch.compile(mode="reduce-overhead") of the SDPA model')
    p.add_argument("--no-timing", action="store_true", help="run each model once for the comparison, time nothing")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--runner-us", type=float, help="the runner's median forward (us), carried into the JSON")
    p.add_argument("--label", default="", help="a name for this run in the JSON (e.g. case 1 f16 trial 1)")
    p.add_argument("--also", nargs=4, action="append", default=[], metavar=("WEIGHTS", "INPUT", "COMPARE", "LABEL"),
                   help="one more trial of the same model shape, compared only (no timing), in this process "
                        "(repeatable: the trials after the first without a Python start and a CUDA context each)")
    p.add_argument("--f64-check", type=int, default=0, metavar="N",
                   help="for the first N elements outside the rule, the model's output in float64 there (a batch "
                        "row at a time, chunked causal attention), and whether ours and what it was compared "
                        "with are each within the rule of it")
    p.add_argument("--json", help="append the results (one per trial) to a JSON list here")
    args = p.parse_args()

    torch.set_float32_matmul_precision("high")
    trials = [(args.weights, args.input, args.compare, args.label, not args.no_timing, args.runner_us)]
    trials += [(w, x, y, label, False, None) for w, x, y, label in args.also]
    results, ok = [], True
    for weights, input_file, compare, label, timing, runner_us in trials:
        result, passed = run_trial(args, weights, input_file, compare, label, timing, runner_us)
        ok = ok and passed
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.json:
        try:
            with open(args.json) as f:
                runs = json.load(f)
        except FileNotFoundError:
            runs = []
        runs += results
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
