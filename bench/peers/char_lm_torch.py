#!/usr/bin/env python3
"""PyTorch on the same GPU, for the character-level runners (`shapetune train lstm|gru`): the same
network (nn.Embedding, nn.LSTM or nn.GRU with num_layers 1 or 2, nn.Linear, CrossEntropyLoss with
the mean over T x B, torch.optim.Adam with no decay) started from the runner's initial weights
(--weights: what `shapetune train lstm --save-weights FILE` wrote; names and layouts are PyTorch's)
and trained on the runner's own batches (--batches: what --save-batches wrote, I32 [batches, T, B],
time-major as nn.LSTM takes them, and the validation batches), so no batching is re-implemented.
The hidden state starts at zero and is carried from step to step, detached, as the runner carries
it. TF32 is off (the runner computes in fp32).

Modes: eager (Adam's for-each implementation); eager_fused (fused Adam); compile
(torch.compile(model, mode="reduce-overhead"); the RNN itself may stay a cuDNN call between
compiled pieces); cuda_graph (the whole step, forward, backward and a capturable fused Adam,
captured once with torch.cuda.graph and replayed: the runner's design). A mode that fails is
reported with its error and the others still run.

Each mode, from the runner's weights:
1. Parity: --steps training steps (default 100) on the first batches in order; the loss of every
   step (each before its update, as the runner records it) and the parameters after step 1 and
   after each step named by --runner-trained. With --runner-results (the runner's --results of a
   run from the same seed) the losses after step 1 and step --steps are compared with the
   runner's; with --runner-trained K=FILE (the runner's --save-trained after `--steps K`) the
   parameters after step K; with a runner run of exactly --steps steps, also the validation bits
   per character after it. Tolerances are TOLERANCES below (stated in the output and the JSON;
   not yet calibrated on a GPU):
     loss after step 1     relative 1e-5 (one forward in fp32, two summation orders)
     loss after step K > 1 relative 1e-3 (fp32 rounding, amplified by K steps of training)
     parameters            at most 1% of the elements farther apart than 1e-3 lr after step 1
                           (Adam's first step moves every element by lr g / (|g| + eps): only
                           gradients near zero can differ), 0.05 lr after later steps
     validation bpc        relative 2% (issue 23's target)
2. Validation loss and bits per character after the parity steps: every validation batch from the
   zero state, the state carried, forward only, the mean of the batches' mean losses (the
   runner's validation_loss()).
3. Timing, as the runner's --timing-suite: --warmup-steps (50) untimed, then --timed-steps (150)
   training steps, each between two CUDA events (host inputs copied inside the timed region for
   cuda_graph), synchronised after each; the batches from the first, wrapping to the first with
   the state zeroed after the last. Median, p10, p90 (linear interpolation between order
   statistics, as harness/stats.cpp).

Prints one line per mode and each comparison; --json writes everything. Exit code 1 when a
comparison misses its tolerance, 2 for bad input or no CUDA device.

    shapetune train gru --seed 1 --steps 100 --save-weights w.st --save-batches b.st \\
        --save-trained g100.st --results gru100.json --sample 0
    shapetune train gru --seed 1 --steps 1 --save-trained g1.st --sample 0
    char_lm_torch.py --weights w.st --batches b.st --runner-results gru100.json \\
        --runner-trained 1=g1.st --runner-trained 100=g100.st --json torch_gru.json"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

DTYPES = {"F32": np.float32, "I32": np.int32, "F64": np.float64, "I64": np.int64}
MODES = ("eager", "eager_fused", "compile", "cuda_graph")
TOLERANCES = {
    "loss_rtol_step_1": 1e-5,
    "loss_rtol_later": 1e-3,
    "parameter_atol_over_lr_step_1": 1e-3,
    "parameter_atol_over_lr_later": 0.05,
    "parameter_outlier_fraction": 0.01,
    "validation_bpc_rtol": 0.02,
}


def read_safetensors(path):
    """The tensors of a safetensors file as numpy arrays, and its metadata (the format is small
    enough to read without the safetensors package, which the GPU box may lack)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        if t["dtype"] not in DTYPES:
            raise SystemExit(f"{path}: {name} is {t['dtype']}; this script reads {', '.join(DTYPES)}")
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(data[base + begin:base + end], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return tensors, metadata


def percentile(sorted_values, q):
    """harness/stats.cpp's percentile: linear interpolation at q (n - 1)."""
    pos = q * (len(sorted_values) - 1)
    lower = math.floor(pos)
    upper = min(lower + 1, len(sorted_values) - 1)
    return sorted_values[lower] + (pos - lower) * (sorted_values[upper] - sorted_values[lower])


class CharLm(nn.Module):
    def __init__(self, cell, vocab, embed, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(embed, hidden, num_layers=layers)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x, state):
        y, state = self.rnn(self.embedding(x), state)
        return self.head(y), state


def as_tuple(state):
    return state if isinstance(state, tuple) else (state,)


class Shape:
    def __init__(self, meta, batch):
        self.cell, self.vocab, self.embed = meta["cell"], int(meta["vocab"]), int(meta["embed"])
        self.hidden, self.layers, self.batch = int(meta["hidden"]), int(meta["layers"]), batch

    def zero_state(self):
        h = torch.zeros(self.layers, self.batch, self.hidden, device="cuda")
        return (h, torch.zeros_like(h)) if self.cell == "lstm" else h


class EagerSteps:
    """eager, eager_fused, compile: step(x, y) runs one training step and returns its loss (on
    the device, before the update); reset_state() zeroes the carried state."""

    def __init__(self, mode, model, shape, lr):
        self.mode, self.shape = mode, shape
        self.opt = torch.optim.Adam(model.parameters(), lr=lr, fused=mode != "eager")
        self.net = torch.compile(model, mode="reduce-overhead") if mode == "compile" else model
        self.loss_fn = nn.CrossEntropyLoss()
        self.reset_state()

    def reset_state(self):
        self.state = self.shape.zero_state()

    def step(self, x, y):
        if self.mode == "compile":
            torch.compiler.cudagraph_mark_step_begin()
        logits, state = self.net(x, self.state)
        loss = self.loss_fn(logits.reshape(-1, self.shape.vocab), y.reshape(-1))
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        state = tuple(s.detach() for s in as_tuple(state))
        if self.mode == "compile":  # the compiled graph's outputs are overwritten by its next replay
            state = tuple(s.clone() for s in state)
        self.state = state if self.shape.cell == "lstm" else state[0]
        return loss.detach()


class GraphSteps:
    """cuda_graph: forward, loss, backward, a capturable fused Adam and the state carried, captured
    once and replayed, as the runner replays its step. The batch is copied into the graph's
    static inputs inside step()."""

    def __init__(self, model, shape, lr, x0, y0):
        self.shape = shape
        loss_fn = nn.CrossEntropyLoss()
        self.static_x, self.static_y = x0.clone(), y0.clone()
        self.state = shape.zero_state()
        self.opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True, capturable=True)
        # Warm-up on a side stream, as torch.cuda.graph asks (cuDNN's workspaces, autograd's
        # buffers): forward and backward only, so the parameters stay the runner's.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                logits, _ = model(self.static_x, self.state)
                loss_fn(logits.reshape(-1, shape.vocab), self.static_y.reshape(-1)).backward()
        torch.cuda.current_stream().wait_stream(side)
        # Adam creates its state (step, exp_avg, exp_avg_sq) on its first step; created inside the
        # capture, its zero fills would be replayed every step. So one step with zero gradients
        # creates it here (m = v = 0: every parameter moves by 0 / (0 + eps) = 0, exactly), then
        # the state is zeroed: the first replay is Adam's step 1, as the runner's first step.
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        self.opt.step()
        for per_parameter in self.opt.state.values():
            for value in per_parameter.values():
                if torch.is_tensor(value):
                    value.zero_()
        self.opt.zero_grad(set_to_none=True)  # the captured backward allocates the gradients
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            logits, new_state = model(self.static_x, self.state)
            self.loss = loss_fn(logits.reshape(-1, shape.vocab), self.static_y.reshape(-1))
            self.loss.backward()
            self.opt.step()
            for s, n in zip(as_tuple(self.state), as_tuple(new_state)):
                s.copy_(n.detach())  # the state carried, detached
        self.reset_state()

    def reset_state(self):
        for s in as_tuple(self.state):
            s.zero_()

    def step(self, x, y):
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        self.graph.replay()
        return self.loss


def parameters_of(model):
    return {k: v.detach().float().cpu().numpy().copy() for k, v in model.state_dict().items()}


def validation_loss(model, shape, inputs, targets):
    loss_fn = nn.CrossEntropyLoss()
    state, total = shape.zero_state(), 0.0
    with torch.no_grad():
        for i in range(inputs.shape[0]):
            logits, state = model(inputs[i], state)
            total += loss_fn(logits.reshape(-1, shape.vocab), targets[i].reshape(-1)).item()
    return total / inputs.shape[0]


def run(mode, weights, shape, data, args, snapshot_steps):
    model = CharLm(shape.cell, shape.vocab, shape.embed, shape.hidden, shape.layers).cuda()
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()}, strict=True)
    inputs, targets = data["inputs"], data["targets"]
    steps = (GraphSteps(model, shape, args.lr, inputs[0], targets[0]) if mode == "cuda_graph"
             else EagerSteps(mode, model, shape, args.lr))

    # 1. Parity: the runner's first --steps steps.
    losses, snapshots = [], {}
    steps.reset_state()
    for i in range(args.steps):
        losses.append(steps.step(inputs[i], targets[i]).item())
        if i + 1 in snapshot_steps:
            snapshots[i + 1] = parameters_of(model)
    # 2. Validation after them.
    valid = None
    if "validation_inputs" in data:
        valid = validation_loss(model, shape, data["validation_inputs"], data["validation_targets"])
    # 3. The timing suite, continuing the training.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, batch = [], 0
    steps.reset_state()
    for i in range(args.warmup_steps + args.timed_steps):
        if batch == inputs.shape[0]:
            steps.reset_state()
            batch = 0
        start.record()
        loss = steps.step(inputs[batch], targets[batch])
        end.record()
        end.synchronize()
        if i >= args.warmup_steps:
            times.append(start.elapsed_time(end))
        batch += 1
    last_loss = loss.item()
    ordered = sorted(times)
    entry = {"step_losses": losses, "loss_after_step_1": losses[0], f"loss_after_step_{args.steps}": losses[-1],
             "loss_after_timing_suite": last_loss,
             "timing_suite": {"warmup_steps": args.warmup_steps, "timed_steps": args.timed_steps,
                              "median_step_ms": percentile(ordered, 0.5), "p10_step_ms": percentile(ordered, 0.1),
                              "p90_step_ms": percentile(ordered, 0.9), "min_step_ms": ordered[0], "step_ms": times}}
    if valid is not None:
        entry["validation_loss"] = valid
        entry["validation_bits_per_character"] = valid / math.log(2)
    return entry, snapshots


def compare_loss(name, runner, torch_value, rtol):
    rel = abs(torch_value - runner) / max(abs(runner), 1e-30)
    return {"check": name, "runner": runner, "torch": torch_value, "relative_difference": rel, "tolerance": rtol,
            "ok": bool(rel <= rtol)}


def compare_parameters(step, runner, torch_params, lr):
    atol = TOLERANCES["parameter_atol_over_lr_step_1" if step == 1 else "parameter_atol_over_lr_later"]
    names = sorted(runner)
    if sorted(torch_params) != names:
        return {"check": f"parameters after step {step}", "ok": False,
                "error": f"tensors differ: runner {names}, torch {sorted(torch_params)}"}
    diff = np.concatenate([np.abs(torch_params[n].astype(np.float64) - runner[n].astype(np.float64)).ravel()
                           for n in names]) / lr
    worst = max(names, key=lambda n: float(np.max(np.abs(torch_params[n] - runner[n]))))
    outliers = float(np.mean(diff > atol))
    return {"check": f"parameters after step {step}", "elements": int(diff.size),
            "median_over_lr": float(np.median(diff)), "p99_over_lr": float(np.percentile(diff, 99)),
            "max_over_lr": float(diff.max()), "max_in": worst, "fraction_beyond_tolerance": outliers,
            "tolerance_over_lr": atol, "allowed_fraction": TOLERANCES["parameter_outlier_fraction"],
            "ok": bool(outliers <= TOLERANCES["parameter_outlier_fraction"])}


def parity(entry, snapshots, runner_results, runner_trained, args):
    checks = []
    if runner_results:
        first = runner_results.get("first_step_losses", [])
        if first:
            checks.append(compare_loss("loss after step 1", first[0], entry["loss_after_step_1"],
                                       TOLERANCES["loss_rtol_step_1"]))
        if args.steps > 1 and len(first) >= args.steps:
            checks.append(compare_loss(f"loss after step {args.steps}", first[args.steps - 1],
                                       entry[f"loss_after_step_{args.steps}"],
                                       TOLERANCES["loss_rtol_step_1" if args.steps == 1 else "loss_rtol_later"]))
        runner_steps = sum(e["steps"] for e in runner_results.get("epochs", []))
        if runner_steps == args.steps and "validation_bits_per_character" in entry:
            checks.append(compare_loss(f"validation bits per character after step {args.steps}",
                                       runner_results["epochs"][-1]["validation_bits_per_character"],
                                       entry["validation_bits_per_character"], TOLERANCES["validation_bpc_rtol"]))
    for step, params in sorted(runner_trained.items()):
        checks.append(compare_parameters(step, params, snapshots[step], args.lr))
    return checks


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", required=True, help="the runner's --save-weights file")
    parser.add_argument("--batches", required=True, help="the runner's --save-batches file")
    parser.add_argument("--steps", type=int, default=100,
                        help="parity: training steps from the weights whose losses are compared (default 100)")
    parser.add_argument("--runner-results", help="the runner's --results JSON of a run from the same weights")
    parser.add_argument("--runner-trained", action="append", default=[], metavar="K=FILE",
                        help="the runner's --save-trained after --steps K (K <= --steps); repeatable")
    parser.add_argument("--warmup-steps", type=int, default=50, help="the timing suite's untimed steps (default 50)")
    parser.add_argument("--timed-steps", type=int, default=150, help="the timing suite's timed steps (default 150)")
    parser.add_argument("--lr", type=float, default=2e-3, help="the runner's --lr (default 0.002, the runner's)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)} (default all)")
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            parser.error(f"--modes: unknown mode {mode!r}; modes: {', '.join(MODES)}")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.warmup_steps < 0 or args.timed_steps < 10:
        parser.error("--warmup-steps must be >= 0 and --timed-steps >= 10 (p10 and p90 need ten samples)")
    runner_trained = {}
    for item in args.runner_trained:
        k, sep, path = item.partition("=")
        if not sep or not k.isdigit() or not 1 <= int(k) <= args.steps:
            parser.error(f"--runner-trained {item!r}: expected K=FILE with 1 <= K <= --steps ({args.steps})")
        runner_trained[int(k)] = read_safetensors(path)[0]
    runner_results = None
    if args.runner_results:
        with open(args.runner_results) as f:
            runner_results = json.load(f)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    weights, meta = read_safetensors(args.weights)
    batches, _ = read_safetensors(args.batches)
    if batches["inputs"].shape[0] < args.steps:
        raise SystemExit(f"{args.batches} holds {batches['inputs'].shape[0]} batches; --steps {args.steps} needs more")
    data = {k: torch.from_numpy(v.astype(np.int64)).cuda() for k, v in batches.items()}
    shape = Shape(meta, int(batches["inputs"].shape[2]))
    if runner_results and (runner_results.get("model") != shape.cell or runner_results.get("hidden") != shape.hidden
                           or runner_results.get("layers") != shape.layers):
        raise SystemExit(f"{args.runner_results} is a run of another model than {args.weights}")
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__} on {props.name}: {shape.cell} {shape.layers} x {shape.hidden}, "
          f"vocab {shape.vocab}, embed {shape.embed}, T {batches['inputs'].shape[1]}, B {shape.batch}; "
          f"parity over {args.steps} steps, timing {args.warmup_steps} warm-up + {args.timed_steps} timed steps")
    results = {"torch": torch.__version__, "device": props.name, "model": meta,
               "seq_len": int(batches["inputs"].shape[1]), "batch": shape.batch, "steps": args.steps, "lr": args.lr,
               "tolerances": TOLERANCES, "modes": {}}
    all_ok = True
    for mode in modes:
        try:
            entry, snapshots = run(mode, weights, shape, data, args, set(runner_trained) | {1, args.steps})
        except Exception as e:  # one mode failing must not lose the others
            print(f"{mode}: failed: {e!r}", file=sys.stderr)
            results["modes"][mode] = {"error": repr(e)}
            continue
        entry["parity"] = parity(entry, snapshots, runner_results, runner_trained, args)
        results["modes"][mode] = entry
        t = entry["timing_suite"]
        bpc = entry.get("validation_bits_per_character")
        print(f"{mode:<12} loss after step 1 {entry['loss_after_step_1']:.6f}, after step {args.steps} "
              f"{entry[f'loss_after_step_{args.steps}']:.6f}"
              + (f", validation {bpc:.4f} bpc" if bpc is not None else "")
              + f"; step median {t['median_step_ms']:.3f} ms (p10 {t['p10_step_ms']:.3f}, p90 {t['p90_step_ms']:.3f})",
              flush=True)
        for c in entry["parity"]:
            all_ok &= c["ok"]
            verdict = "ok" if c["ok"] else "MISSED"
            if "relative_difference" in c:
                print(f"    {c['check']}: runner {c['runner']:.6f}, torch {c['torch']:.6f}, relative "
                      f"{c['relative_difference']:.2e} (tolerance {c['tolerance']:.0e}) {verdict}")
            elif "error" in c:
                print(f"    {c['check']}: {c['error']} {verdict}")
            else:
                print(f"    {c['check']}: |difference| / lr median {c['median_over_lr']:.2e}, p99 "
                      f"{c['p99_over_lr']:.2e}, max {c['max_over_lr']:.2e} ({c['max_in']}); "
                      f"{100 * c['fraction_beyond_tolerance']:.3f}% beyond {c['tolerance_over_lr']:.0e} lr "
                      f"(allowed {100 * c['allowed_fraction']:.0f}%) {verdict}")
    results["parity_ok"] = all_ok
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
