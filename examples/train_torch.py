#!/usr/bin/env python3
"""The PyTorch variant of examples/train_loop.py: a linear model trained with torch.optim,
checkpointed with torch.save and resumed through trainyard.checkpoint. Needs torch
(exits 3 with a message when it is not installed).

    PYTHONPATH=clients/python TRAINYARD_CHECKPOINT_DIR=/tmp/ck python3 examples/train_torch.py --steps 200
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))

try:
    import torch
except ImportError:
    print("train_torch.py needs PyTorch (pip install torch); see examples/train_loop.py for "
          "the pure-Python loop", file=sys.stderr)
    sys.exit(3)

from trainyard import checkpoint  # noqa: E402


def batch(step: int, size: int = 32):
    g = torch.Generator().manual_seed(step)
    x = torch.rand(size, 1, generator=g) * 2 - 1
    return x, 3 * x - 2


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--step-time", type=float, default=0.0)
    p.add_argument("--checkpoint-every-steps", type=int, default=100)
    p.add_argument("--checkpoint-every-seconds", type=float, default=None)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    ckpt = checkpoint.Checkpointer(every_steps=args.checkpoint_every_steps,
                                   every_seconds=args.checkpoint_every_seconds)
    step = 0
    if ckpt.resume_from:
        data = torch.load(ckpt.resume_from)
        model.load_state_dict(data["model"])
        opt.load_state_dict(data["optimizer"])
        step = int(data["step"])
        emit(event="resumed", step=step, uri=ckpt.resume_from, attempt=ckpt.attempt)
    else:
        emit(event="started", attempt=ckpt.attempt)
    loss = torch.tensor(0.0)
    while step < args.steps:
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if args.step_time:
            time.sleep(args.step_time)
        if ckpt.due(step) or step == args.steps:
            path = ckpt.path_for(step)
            tmp = f"{path}.tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, path)
            ckpt.saved(step, path, metadata={"loss": f"{loss.item():.6f}"})
            emit(event="checkpoint", step=step, uri=str(path), loss=loss.item())
        if ckpt.stop_requested:
            emit(event="stopped", step=step)
            return 0
    emit(event="done", step=step, w=model.weight.item(), b=model.bias.item(), loss=loss.item())
    return 0


if __name__ == "__main__":
    sys.exit(main())
