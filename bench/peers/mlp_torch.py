#!/usr/bin/env python3
"""PyTorch on the same GPU, for the MLP runner (`shapetune train mlp`): the same 784-256-128-10
ReLU network, nn.Linear's initialisation, Adam (lr 1e-3, no decay), batch 128, cross-entropy,
Fashion-MNIST standardised the same way, the whole training set on the GPU (no DataLoader: a
fresh torch.randperm per epoch and index_select batches, as the runner gathers on the device),
the last partial batch dropped. Four ways: eager (Adam's default for-each implementation);
torch.compile(model, mode="reduce-overhead") (forward and, through AOTAutograd, backward
replayed as CUDA graphs; loss and fused Adam eager); torch.compile(model) in the default mode;
and eager with the fused Adam. Per epoch: training time (synchronised wall clock around the epoch's
steps, shuffle included, evaluation excluded, as the runner measures it), loss, test accuracy.
The first epoch of the compiled run includes compilation; the summary uses the median of the
epochs after the first for every mode. --json writes everything."""
import argparse
import gzip
import json
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, rank = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(data_dir, device):
    def split(prefix):
        x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").reshape(-1, 784)
        y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz")
        x = torch.from_numpy(x.astype(np.float32)).to(device)
        # The runner's normalisation: p * (1 / (255 * 0.353)) - 0.286 / 0.353, in float.
        x = x * np.float32(1.0 / (255.0 * 0.3530)) + np.float32(-0.2860 / 0.3530)
        return x, torch.from_numpy(y.astype(np.int64)).to(device)
    return split("train"), split("t10k")


def run(mode, train, test, epochs, batch, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
    if mode in ("compile", "compile_default", "eager_fused"):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    net = model
    if mode == "compile":
        # The model compiled; AOTAutograd compiles its backward too, and reduce-overhead replays
        # both as CUDA graphs. Loss and the fused Adam run eagerly around them.
        net = torch.compile(model, mode="reduce-overhead")
    elif mode == "compile_default":
        net = torch.compile(model)  # Inductor kernels, no CUDA graphs

    def forward_loss(x, y):
        return F.cross_entropy(net(x), y)

    def step(x, y):
        loss = forward_loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()  # set_to_none: reduce-overhead's backward outputs become the new grads
        return loss.detach()
    (xtr, ytr), (xte, yte) = train, test
    steps = xtr.shape[0] // batch
    out = []
    for epoch in range(1, epochs + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        order = torch.randperm(xtr.shape[0], device="cuda")
        loss_sum = torch.zeros((), device="cuda")
        for i in range(steps):
            if mode == "compile":
                # A new iteration for CUDA graph trees: the previous step's outputs may be reused.
                torch.compiler.cudagraph_mark_step_begin()
            idx = order[i * batch:(i + 1) * batch]
            loss_sum += step(xtr.index_select(0, idx), ytr.index_select(0, idx))
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        out.append({"epoch": epoch, "train_seconds": seconds, "train_loss": loss_sum.item() / steps,
                    "test_accuracy": acc, "images_per_second": steps * batch / seconds})
        print(f"{mode:<12} epoch {epoch:>2}  loss {out[-1]['train_loss']:.4f}  acc {100 * acc:.2f}%  "
              f"{seconds:.3f} s  {steps * batch / seconds:,.0f} images/s", flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default="eager,compile,compile_default,eager_fused")
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as the runner computes it
    torch.backends.cudnn.allow_tf32 = False
    train, test = load(args.data, "cuda")
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__} on {props.name}")
    results = {"torch": torch.__version__, "device": props.name, "batch": args.batch, "epochs": args.epochs,
               "modes": {}}
    for mode in args.modes.split(","):
        try:
            epochs = run(mode, train, test, args.epochs, args.batch, args.seed)
        except Exception as e:  # one mode failing (a compile error) must not lose the others
            print(f"{mode}: failed: {e!r}", file=sys.stderr)
            results["modes"][mode] = {"error": repr(e)}
            continue
        steady = [e["train_seconds"] for e in epochs[1:]] or [epochs[0]["train_seconds"]]
        results["modes"][mode] = {"epochs": epochs, "median_epoch_seconds_after_first": statistics.median(steady),
                                  "final_test_accuracy": epochs[-1]["test_accuracy"]}
        print(f"{mode:<12} median epoch (after the first): {statistics.median(steady):.3f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
