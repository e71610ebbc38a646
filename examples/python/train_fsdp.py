"""Train a small GPT-style language model with PyTorch FSDP (fully_shard), started by torchrun.

Every GPU of every node runs one copy; parameters, gradients and optimizer state are
sharded across all of them. Checkpoints (torch.distributed.checkpoint, one file per
rank) go to --ckpt-dir every --ckpt-every steps, and a restarted job resumes from the
newest one: put --ckpt-dir on shared storage.

Data: --data is a file of uint16 token ids (for example a tokenized corpus written with
numpy's tofile); without it the model trains on random tokens, which checks the plumbing.
Without CUDA it runs on the CPU with the gloo backend (a smoke test, not training).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, context: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(context, dim))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True,
                                       norm_first=True) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        x = self.embed(tokens) + self.pos[:n]
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        return self.head(x)


def batches(path: str | None, vocab: int, batch: int, context: int, seed: int):
    rng = np.random.default_rng(seed)
    data = np.memmap(path, dtype=np.uint16, mode="r") if path else None
    while True:
        if data is None:
            yield torch.from_numpy(rng.integers(0, vocab, (batch, context + 1)))
        else:
            starts = rng.integers(0, len(data) - context - 1, batch)
            rows = np.stack([data[s:s + context + 1] for s in starts])
            yield torch.from_numpy(rows.astype(np.int64))


def latest_step(ckpt_dir: Path) -> int | None:
    steps = [int(p.name.split("-")[1]) for p in ckpt_dir.glob("step-*")
             if (p / ".metadata").exists()]  # complete checkpoints only
    return max(steps, default=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--data")
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8, help="sequences per GPU per step")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "checkpoints"))
    parser.add_argument("--ckpt-every", type=int, default=100)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")  # RANK, WORLD_SIZE... from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)  # the same initial weights on every rank before sharding

    model = GPT(args.vocab, args.dim, args.layers, args.heads, args.context).to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if cuda else MixedPrecisionPolicy()
    for block in model.blocks:  # each transformer block is its own FSDP unit
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)

    ckpt_dir = Path(args.ckpt_dir)
    start = 0
    if (step := latest_step(ckpt_dir)) is not None:
        model_sd, optim_sd = get_state_dict(model, optim)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=ckpt_dir / f"step-{step}")
        set_state_dict(model, optim, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        start = step
        if rank == 0:
            print(f"resumed from {ckpt_dir}/step-{step}", flush=True)

    data = batches(args.data, args.vocab, args.batch, args.context, seed=1000 * start + rank)
    tick = time.monotonic()
    for step in range(start + 1, args.steps + 1):
        seq = next(data).to(device)
        logits = model(seq[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), seq[:, 1:].flatten())
        optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # works on FSDP's sharded tensors
        optim.step()
        if rank == 0 and step % 10 == 0:
            rate = 10 * args.batch * args.context * world / (time.monotonic() - tick)
            print(f"step {step} loss {loss.item():.4f} tokens/s {rate:,.0f}", flush=True)
            tick = time.monotonic()
        if step % args.ckpt_every == 0 or step == args.steps:
            model_sd, optim_sd = get_state_dict(model, optim)
            dcp.save({"model": model_sd, "optim": optim_sd},
                     checkpoint_id=ckpt_dir / f"step-{step}")
            if rank == 0:
                print(f"checkpoint {ckpt_dir}/step-{step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
