#!/usr/bin/env python3
"""PyTorch on the same GPU, for the logistic-regression runner (`shapetune train logreg`): the
same model and data, so the two runs' numbers can be laid side by side. Fashion-MNIST's two
--classes (A -> label 0, B -> label 1, rows kept in file order), pixels p * float32(1/255) as the
runner scales them, nn.Linear(784, 1) with weight and bias set to zero (the runner's start: with
no random initialisation the two runs begin from the same point exactly), BCEWithLogitsLoss
(mean), Adam with the runner's lr, betas 0.9/0.999, eps 1e-8, no weight decay. Full batch by
default; --batch B takes the batches in file order, the last partial one dropped, as the runner
does without --shuffle (the runner's shuffle is not reproduced here). TF32 off: fp32 as the
runner computes it. Per epoch: the mean of the steps' losses (each before its update), the
accuracy on the training rows and the test loss and accuracy after the epoch (sigmoid > 1/2
predicts label 1), and the median step time (CUDA events around each step). Prints the results
as JSON; --json also writes them to a file."""
import argparse
import json
import statistics
import sys

import numpy as np
import torch
import torch.nn as nn

from mlp_torch import read_idx  # the IDX reader of the MLP peer: one copy of the format


def load(data_dir, classes, device):
    def split(prefix):
        x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").reshape(-1, 784)
        y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz")
        keep = (y == classes[0]) | (y == classes[1])
        x = x[keep].astype(np.float32) * np.float32(1.0 / 255.0)
        labels = (y[keep] == classes[1]).astype(np.float32)
        return torch.from_numpy(x).to(device), torch.from_numpy(labels).to(device)
    return split("train"), split("t10k")


def evaluate(model, loss_fn, x, y):
    with torch.no_grad():
        z = model(x).squeeze(1)
        return ((torch.sigmoid(z) > 0.5).float() == y).float().mean().item(), loss_fn(z, y).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--classes", default="0,6")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch", type=int, default=0, help="0: full batch")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    classes = [int(c) for c in args.classes.split(",")]
    if len(classes) != 2 or classes[0] == classes[1] or not all(0 <= c <= 9 for c in classes):
        raise SystemExit("--classes expects A,B: two different classes 0..9")
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    (xtr, ytr), (xte, yte) = load(args.data, classes, "cuda")
    rows = xtr.shape[0]
    batch = rows if args.batch == 0 else args.batch
    if batch > rows:
        raise SystemExit(f"--batch {batch} is larger than the {rows} training rows")
    steps = rows // batch

    model = nn.Linear(784, 1).cuda()
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    loss_fn = nn.BCEWithLogitsLoss()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)

    epochs = []
    for epoch in range(1, args.epochs + 1):
        losses, events = [], []
        for i in range(steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = loss_fn(model(xtr[i * batch:(i + 1) * batch]).squeeze(1), ytr[i * batch:(i + 1) * batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            end.record()
            losses.append(loss.detach())
            events.append((start, end))
        torch.cuda.synchronize()
        step_ms = [s.elapsed_time(e) for s, e in events]
        train_acc, _ = evaluate(model, loss_fn, xtr, ytr)
        test_acc, test_loss = evaluate(model, loss_fn, xte, yte)
        epochs.append({"epoch": epoch, "steps": steps, "train_loss": torch.stack(losses).mean().item(),
                       "train_accuracy": train_acc, "test_loss": test_loss, "test_accuracy": test_acc,
                       "median_step_ms": statistics.median(step_ms)})
    props = torch.cuda.get_device_properties(0)
    results = {"model": "logreg", "torch": torch.__version__, "device": props.name, "classes": classes,
               "train_rows": rows, "test_rows": xte.shape[0], "batch": args.batch, "lr": args.lr,
               "epochs": epochs}
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
