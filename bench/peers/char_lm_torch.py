#!/usr/bin/env python3
"""PyTorch on the same GPU, for the character-level runners (`shapetune train lstm|gru`): the same
network (nn.Embedding, nn.LSTM or nn.GRU with num_layers 1 or 2, nn.Linear, CrossEntropyLoss with
the mean over T x B, torch.optim.Adam with no decay) started from the runner's initial weights
(--weights: what `shapetune train lstm --save-weights FILE` wrote; names and layouts are PyTorch's)
and trained on the runner's own batches (--batches: what --save-batches wrote, I32 [steps, T, B],
time-major as nn.LSTM takes them), so no batching is re-implemented. The hidden state starts at
zero and is carried from step to step, detached, as the runner carries it. TF32 is off (the
runner computes in fp32).

Modes: eager (Adam's for-each implementation); eager_fused (fused Adam); compile
(torch.compile(model, mode="reduce-overhead"); the RNN itself may stay a cuDNN call between
compiled pieces); cuda_graph (the whole step, forward, backward and a capturable fused Adam,
captured once with torch.cuda.graph and replayed, the runner's design). A mode that fails is
reported with its error and the others still run. Per mode: the loss after step 1 and after step
100 (compare with the runner's "loss after step 1 / step 100" line), and the median step time
(CUDA events around each step, as the runner times its replays) over the steps after the first
ten. Prints one line per mode; --json writes everything."""
import argparse
import json
import statistics
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

DTYPES = {"F32": np.float32, "I32": np.int32, "F64": np.float64, "I64": np.int64}


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


class CharLm(nn.Module):
    def __init__(self, cell, vocab, embed, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(embed, hidden, num_layers=layers)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x, state):
        y, state = self.rnn(self.embedding(x), state)
        return self.head(y), state


def zero_state(cell, layers, batch, hidden):
    h = torch.zeros(layers, batch, hidden, device="cuda")
    return (h, torch.zeros_like(h)) if cell == "lstm" else h


def detach(state):
    return tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()


def run(mode, weights, meta, inputs, targets, steps, lr):
    cell, vocab, embed = meta["cell"], int(meta["vocab"]), int(meta["embed"])
    hidden, layers = int(meta["hidden"]), int(meta["layers"])
    model = CharLm(cell, vocab, embed, hidden, layers).cuda()
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()}, strict=True)
    batch = inputs.shape[2]
    loss_fn = nn.CrossEntropyLoss()
    fused = mode in ("eager_fused", "compile", "cuda_graph")
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=fused, capturable=mode == "cuda_graph")
    net = torch.compile(model, mode="reduce-overhead") if mode == "compile" else model
    losses, times = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    if mode == "cuda_graph":
        static_x = inputs[0].clone()
        static_y = targets[0].clone()
        state = zero_state(cell, layers, batch, hidden)
        # Warm-up on a side stream, as torch.cuda.graph asks, on a copy of everything it changes.
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=False)
                logits, _ = model(static_x, state)
                loss_fn(logits.reshape(-1, vocab), static_y.reshape(-1)).backward()
        torch.cuda.current_stream().wait_stream(side)
        model.load_state_dict(saved)
        opt.zero_grad(set_to_none=False)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits, new_state = model(static_x, state)
            static_loss = loss_fn(logits.reshape(-1, vocab), static_y.reshape(-1))
            static_loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            for s, n in zip(state if isinstance(state, tuple) else (state,),
                            new_state if isinstance(new_state, tuple) else (new_state,)):
                s.copy_(n.detach())  # the state carried, detached
        for s in state if isinstance(state, tuple) else (state,):
            s.zero_()
        for i in range(steps):
            static_x.copy_(inputs[i])
            static_y.copy_(targets[i])
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
            losses.append(static_loss.item())
        return losses, times

    state = zero_state(cell, layers, batch, hidden)
    for i in range(steps):
        if mode == "compile":
            torch.compiler.cudagraph_mark_step_begin()
        start.record()
        logits, state = net(inputs[i], state)
        loss = loss_fn(logits.reshape(-1, vocab), targets[i].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        state = detach(state)
        if mode == "compile":
            state = tuple(s.clone() for s in state) if isinstance(state, tuple) else state.clone()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        losses.append(loss.item())
    return losses, times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", required=True, help="the runner's --save-weights file")
    parser.add_argument("--batches", required=True, help="the runner's --save-batches file")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=2e-3, help="the runner's --lr (default 0.002, the runner's)")
    parser.add_argument("--modes", default="eager,eager_fused,compile,cuda_graph")
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    weights, meta = read_safetensors(args.weights)
    batches, _ = read_safetensors(args.batches)
    if batches["inputs"].shape[0] < args.steps:
        raise SystemExit(f"{args.batches} holds {batches['inputs'].shape[0]} batches; --steps {args.steps} needs more")
    inputs = torch.from_numpy(batches["inputs"].astype(np.int64)).cuda()
    targets = torch.from_numpy(batches["targets"].astype(np.int64)).cuda()
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__} on {props.name}: {meta['cell']} {meta['layers']} x {meta['hidden']}, "
          f"vocab {meta['vocab']}, embed {meta['embed']}, T {inputs.shape[1]}, B {inputs.shape[2]}")
    results = {"torch": torch.__version__, "device": props.name, "model": meta, "seq_len": int(inputs.shape[1]),
               "batch": int(inputs.shape[2]), "steps": args.steps, "lr": args.lr, "modes": {}}
    for mode in args.modes.split(","):
        try:
            losses, times = run(mode, weights, meta, inputs, targets, args.steps, args.lr)
        except Exception as e:  # one mode failing must not lose the others
            print(f"{mode}: failed: {e!r}", file=sys.stderr)
            results["modes"][mode] = {"error": repr(e)}
            continue
        steady = times[10:] or times
        entry = {"loss_after_step_1": losses[0], "loss_after_last_step": losses[-1],
                 "median_step_ms": statistics.median(steady), "step_losses": losses}
        if len(losses) >= 100:
            entry["loss_after_step_100"] = losses[99]
        results["modes"][mode] = entry
        print(f"{mode:<12} loss after step 1 {losses[0]:.6f}, after step {len(losses)} {losses[-1]:.6f}, "
              f"median step {entry['median_step_ms']:.3f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
