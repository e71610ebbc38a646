"""Embed one shard of a text file, one document per line, into JSON lines.

Shard ``k`` of ``n`` takes the lines whose index ``i`` has ``i % n == k``, so every line
is embedded by exactly one shard whatever the number of shards. Each output line is
``{"line": i, "embedding": [...]}``.

The model here is a stand-in that runs anywhere (feature hashing of character
trigrams, standard library only), so the array job can be tried on any cluster.
Replace ``embed`` with your model, for example::

    model = SentenceTransformer("intfloat/e5-large-v2", device="cuda")
    def embed(texts): return model.encode(texts, batch_size=256).tolist()
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys

DIM = 64


def embed(texts: list[str]) -> list[list[float]]:
    """A unit vector per text from its character trigrams (the stand-in model)."""
    vectors = []
    for text in texts:
        vec = [0.0] * DIM
        padded = f"  {text.lower()} "
        for i in range(len(padded) - 2):
            digest = hashlib.blake2b(padded[i:i + 3].encode(), digest_size=4).digest()
            h = int.from_bytes(digest, "little")
            vec[h % DIM] += 1.0 if h & 0x80000000 else -1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        vectors.append([round(v / norm, 6) for v in vec])
    return vectors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--shard", type=int, required=True)
    parser.add_argument("--num-shards", type=int, required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    if not 0 <= args.shard < args.num_shards:
        parser.error(f"--shard {args.shard} is not in 0..{args.num_shards - 1}")

    with open(args.input, encoding="utf-8") as src:
        mine = [(i, line.rstrip("\n")) for i, line in enumerate(src)
                if i % args.num_shards == args.shard]
    with open(args.output, "w", encoding="utf-8") as out:
        for start in range(0, len(mine), args.batch_size):
            batch = mine[start:start + args.batch_size]
            for (i, _), vector in zip(batch, embed([t for _, t in batch]), strict=True):
                out.write(json.dumps({"line": i, "embedding": vector}) + "\n")
    print(f"shard {args.shard}/{args.num_shards}: {len(mine)} documents", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
