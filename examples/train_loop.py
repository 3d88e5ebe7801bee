#!/usr/bin/env python3
"""A small training loop that checkpoints and resumes through trainyard.checkpoint.

Pure Python: fits y = 3x - 2 with stochastic gradient descent on a deterministic data
stream, so a run resumed from a checkpoint ends with exactly the same weights as an
uninterrupted one. Run it as the command of a job (docs/job-yaml.md), or by hand:

    PYTHONPATH=clients/python TRAINYARD_CHECKPOINT_DIR=/tmp/ck python3 examples/train_loop.py --steps 200

It prints one JSON line per event ("resumed", "checkpoint", "done") on stdout.
On SIGUSR1 it checkpoints at the next step; on SIGTERM it checkpoints and exits 0 (the
grace period of a preemption). See examples/train_torch.py for the PyTorch variant.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))

from trainyard import checkpoint  # noqa: E402


def sample(step: int):
    """Deterministic data point for a step: x in [-1, 1), y = 3x - 2."""
    x = ((step * 7919) % 2000) / 1000.0 - 1.0
    return x, 3.0 * x - 2.0


def train_step(state: dict, step: int, lr: float) -> float:
    x, y = sample(step)
    pred = state["w"] * x + state["b"]
    err = pred - y
    state["w"] -= lr * 2 * err * x
    state["b"] -= lr * 2 * err
    return err * err


def save(state: dict, step: int, path) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step, "state": state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["state"], int(data["step"])


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000, help="total training steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--step-time", type=float, default=0.0,
                   help="seconds to sleep per step (to look like real work)")
    p.add_argument("--checkpoint-every-steps", type=int, default=100)
    p.add_argument("--checkpoint-every-seconds", type=float, default=None)
    args = p.parse_args(argv)

    ckpt = checkpoint.Checkpointer(every_steps=args.checkpoint_every_steps,
                                   every_seconds=args.checkpoint_every_seconds)
    state, step = {"w": 0.0, "b": 0.0}, 0
    if ckpt.resume_from:
        state, step = load(ckpt.resume_from)
        emit(event="resumed", step=step, uri=ckpt.resume_from, attempt=ckpt.attempt)
    else:
        emit(event="started", attempt=ckpt.attempt)
    loss = 0.0
    while step < args.steps:
        loss = train_step(state, step, args.lr)
        step += 1
        if args.step_time:
            time.sleep(args.step_time)
        if ckpt.due(step) or step == args.steps:
            path = ckpt.path_for(step)
            save(state, step, path)
            ckpt.saved(step, path, metadata={"loss": f"{loss:.6f}"})
            emit(event="checkpoint", step=step, uri=str(path), loss=loss)
        if ckpt.stop_requested:
            emit(event="stopped", step=step)
            ckpt.close()
            return 0
    emit(event="done", step=step, w=state["w"], b=state["b"], loss=loss)
    ckpt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
