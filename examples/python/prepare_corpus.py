"""Stage 1 of the pipeline example: clean a raw text file into the corpus stage 2 embeds.

Collapses white space, drops empty lines and exact duplicates (keeping the first), and
writes the result under a temporary name renamed when complete, so stage 2 never reads
a half-written corpus.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    seen: set[str] = set()
    kept = total = 0
    with open(args.source, encoding="utf-8") as src, \
            open(args.output + ".partial", "w", encoding="utf-8") as out:
        for line in src:
            total += 1
            text = " ".join(line.split())
            if text and text not in seen:
                seen.add(text)
                out.write(text + "\n")
                kept += 1
    os.replace(args.output + ".partial", args.output)
    print(f"{kept} of {total} lines kept -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
