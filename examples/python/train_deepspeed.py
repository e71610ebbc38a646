"""Train a small GPT-style language model with DeepSpeed ZeRO.

Works under either launcher of the examples: srun (deepspeed-srun.sbatch sets RANK,
LOCAL_RANK and WORLD_SIZE from Slurm's numbers) or the deepspeed launcher
(deepspeed-launcher.sbatch), which sets them itself. ZeRO stage, precision and batch
size come from the DeepSpeed config file (ds_config.json). Checkpoints go to --ckpt-dir
(on shared storage) every --ckpt-every steps; a restarted job resumes from the latest.
"""

from __future__ import annotations

import argparse
import os

import deepspeed
import torch
from torch import nn


class CausalLM(nn.Module):
    """Token embedding, causal transformer blocks, output projection (random tokens in)."""

    def __init__(self, vocab: int, dim: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, dim // 64, 4 * dim, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1],
                                                              device=tokens.device)
        return self.head(self.blocks(self.embed(tokens), mask=mask, is_causal=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "checkpoints"))
    parser.add_argument("--ckpt-every", type=int, default=100)
    parser.add_argument("--local_rank", type=int, default=-1)  # given by the deepspeed launcher
    parser = deepspeed.add_config_arguments(parser)  # --deepspeed_config
    args = parser.parse_args()

    deepspeed.init_distributed("nccl")
    torch.manual_seed(0)
    model = CausalLM(args.vocab, args.dim, args.layers)
    engine, _, _, _ = deepspeed.initialize(args=args, model=model,
                                           model_parameters=model.parameters())
    start = 0
    _, client = engine.load_checkpoint(args.ckpt_dir)  # (None, None) when there is none
    if client:
        start = client["step"]

    for step in range(start + 1, args.steps + 1):
        seq = torch.randint(0, args.vocab, (engine.train_micro_batch_size_per_gpu(),
                                            args.context + 1), device=engine.device)
        logits = engine(seq[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), seq[:, 1:].flatten())
        engine.backward(loss)
        engine.step()
        if engine.global_rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            engine.save_checkpoint(args.ckpt_dir, tag=f"step-{step}", client_state={"step": step})


if __name__ == "__main__":
    main()
