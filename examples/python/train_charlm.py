"""A character-level language model trained data-parallel with JAX on CPUs, across nodes.

Spot-safe: it checkpoints to shared storage every --checkpoint-every steps and on SIGTERM
(what Slurm sends on preemption, ``scontrol requeue`` and at the time limit), and a new
run (the requeued job) resumes from the newest complete checkpoint, at the next step.

One process per task (``srun --ntasks-per-node=1``): ``jax.distributed.initialize()``
finds Slurm by itself (SLURM_STEP_NODELIST, SLURM_PROCID, SLURM_NTASKS; the coordinator
is the step's first node, port 61440 + job id % 4096) and the processes' CPUs form one
mesh. Each process draws its own batch, XLA sums the gradients across processes (gloo
over TCP for CPUs, NCCL on GPUs), and every process applies the same Adam update, so the
replicas stay equal; the script proves it by printing a digest of its parameters.

The model: the previous --context characters, embedded, through one tanh layer, to the
next character's logits. Small enough for 2 CPUs, real enough that the loss falls.

Exit codes: 0 when trained to the last step, and when stopped by SIGUSR1 (the time-limit
warning) after its checkpoint: every rank exits 0 at once (``srun --kill-on-bad-exit=1``
would take a first rank's non-zero exit for a failure and kill the others mid-shutdown),
and rank 0 records the stop in --stop-record for the batch script, which requeues the job.
143 (128 + SIGTERM) when stopped by SIGTERM after its checkpoint: Slurm is requeuing or
ending the job as it decided.

Output (rank 0, JSON lines): {"event": "start", ...}, {"event": "step", "step": n,
"loss": x} every --log-every steps, {"event": "checkpoint", "step": n}, {"event": "end"};
every rank: {"event": "params", "rank": r, "step": n, "sha256": ...} after its first step
and at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import jax

CHECKPOINT_RE = re.compile(r"^step-(\d{8})\.npz$")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a UTF-8 text file to learn from")
    p.add_argument("--checkpoint-dir", required=True, help="on storage every node shares")
    p.add_argument("--steps", type=int, default=2000, help="train until this step")
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--keep", type=int, default=3, help="checkpoints kept")
    p.add_argument("--batch", type=int, default=64, help="sequences per process and step")
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--embed", type=int, default=24)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--stop-record", type=Path,
                   help="a file rank 0 writes (step and signal, JSON) when it stops on "
                        "SIGUSR1 after its checkpoint; the batch script requeues the job "
                        "when it finds it")
    return p.parse_args(argv)


def emit(**record: object) -> None:
    print(json.dumps(record, sort_keys=True), flush=True)


def newest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    found = [(int(m.group(1)), p) for p in directory.glob("step-*.npz")
             if (m := CHECKPOINT_RE.match(p.name))]
    return max(found) if found else None


def save_checkpoint(directory: Path, step: int, arrays: dict[str, np.ndarray],
                    keep: int, why: str = "periodic") -> Path:
    """Written under a temporary name and renamed: a run killed half-way through a write
    leaves the previous checkpoint as the newest complete one."""
    final = directory / f"step-{step:08d}.npz"
    tmp = directory / f".step-{step:08d}.npz.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        np.savez(handle, step=np.int64(step), why=np.str_(why), **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, final)
    old = sorted(p for p in directory.glob("step-*.npz") if CHECKPOINT_RE.match(p.name))
    for stale in old[:-keep]:
        stale.unlink(missing_ok=True)
    return final


def record_stop(path: Path, step: int, signal_name: str) -> None:
    """The stop record, written under a temporary name and renamed (whole or absent)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"step": step, "signal": signal_name}) + "\n")
    os.replace(tmp, path)


def digest(leaves: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for leaf in leaves:
        h.update(np.ascontiguousarray(leaf).tobytes())
    return h.hexdigest()[:16]


def read_tokens(path: str) -> tuple[list[str], np.ndarray]:
    """The text's characters (the vocabulary, sorted) and the text as their indices."""
    text = Path(path).read_text(encoding="utf-8")
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    return vocab, np.fromiter((index[c] for c in text), dtype=np.int32, count=len(text))


class Model:
    """The previous T characters, embedded (E), through one tanh layer (H), to the next
    character's logits (V); each step an Adam update with learning rate ``lr``."""

    def __init__(self, vocab: int, context: int, embed: int, hidden: int, lr: float) -> None:
        self.V, self.T, self.E, self.H, self.lr = vocab, context, embed, hidden, lr

    def init_params(self, key: jax.Array) -> dict[str, jax.Array]:
        import jax
        import jax.numpy as jnp

        V, T, E, H = self.V, self.T, self.E, self.H
        k1, k2, k3 = jax.random.split(key, 3)
        return {"embed": jax.random.normal(k1, (V, E)) * 0.1,
                "w1": jax.random.normal(k2, (T * E, H)) / np.sqrt(T * E), "b1": jnp.zeros(H),
                "w2": jax.random.normal(k3, (H, V)) / np.sqrt(H), "b2": jnp.zeros(V)}

    def loss(self, params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
        import jax
        import jax.numpy as jnp

        h = params["embed"][x].reshape(x.shape[0], self.T * self.E)
        h = jnp.tanh(h @ params["w1"] + params["b1"])
        logits = h @ params["w2"] + params["b2"]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def train_step(self, params, m, v, step, x, y, stop_flags):  # type: ignore[no-untyped-def]
        import jax
        import jax.numpy as jnp

        # x, y hold every process's batch (sharded by rank): the mean loss and its
        # gradients are over the global batch, so XLA all-reduces the gradients.
        loss, grads = jax.value_and_grad(self.loss)(params, x, y)
        b1, b2, t = 0.9, 0.999, step.astype(jnp.float32)
        m = jax.tree.map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        params = jax.tree.map(
            lambda p, m_, v_: p - self.lr * (m_ / (1 - b1 ** t))
            / (jnp.sqrt(v_ / (1 - b2 ** t)) + 1e-8), params, m, v)
        # Any rank signalled: every rank stops after this same step, with the same signal
        # (the highest number: SIGTERM, 15, over SIGUSR1, 10).
        return params, m, v, loss, jnp.max(stop_flags)


class Trainer:
    """This process's part of the run: the model's state (parameters and Adam's moments),
    replicated on every process; the batches, sharded by rank; the checkpoints, written by
    rank 0."""

    def __init__(self, args: argparse.Namespace, model: Model, tokens: np.ndarray,
                 shardings: tuple[Any, Any]) -> None:
        import jax

        self.args, self.model, self.tokens = args, model, tokens
        self.rank, self.world = jax.process_index(), jax.process_count()
        self.replicated, self.by_rank = shardings
        self.step_fn = jax.jit(model.train_step, out_shardings=(self.replicated,) * 5)
        self.ckpt_dir = Path(args.checkpoint_dir)
        self.start = 0
        self.began = 0.0  # from the end of the first step: its time is mostly compiling
        self.params: dict[str, jax.Array] = {}
        self.m: dict[str, jax.Array] = {}
        self.v: dict[str, jax.Array] = {}

    def to_global(self, tree: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        import jax

        return {k: jax.make_array_from_process_local_data(self.replicated, np.asarray(a))
                for k, a in tree.items()}

    @staticmethod
    def to_host(tree: dict[str, jax.Array]) -> dict[str, np.ndarray]:
        return {k: np.asarray(a.addressable_data(0)) for k, a in tree.items()}

    def resume(self) -> None:
        """From the newest checkpoint, or from fresh parameters; rank 0 says which."""
        import jax
        from jax.experimental import multihost_utils

        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        # Rank 0 picks the checkpoint and every rank loads that one, even if a newer one
        # appeared meanwhile.
        found = newest_checkpoint(self.ckpt_dir) if self.rank == 0 else None
        start = int(multihost_utils.broadcast_one_to_all(np.int64(found[0] if found else 0)))
        why = None
        if start:
            with np.load(self.ckpt_dir / f"step-{start:08d}.npz") as saved:
                host = {k: saved[k] for k in saved.files}
            why = str(host.pop("why", "periodic"))
            self.params, self.m, self.v = (
                self.to_global({k[2:]: a for k, a in host.items() if k.startswith(prefix)})
                for prefix in ("p/", "m/", "v/"))
        else:
            self.params = self.to_global({k: np.asarray(a) for k, a in self.model.init_params(
                jax.random.key(self.args.seed)).items()})
            self.m = self.to_global({k: np.zeros(a.shape, np.float32)
                                     for k, a in self.params.items()})
            self.v = self.to_global({k: np.zeros(a.shape, np.float32)
                                     for k, a in self.params.items()})
        self.start = start
        if self.rank == 0:
            emit(event="start", resumed_from=start, checkpoint=why, world=self.world,
                 vocab=self.model.V, characters=len(self.tokens),
                 restart_count=int(os.environ.get("SLURM_RESTART_COUNT", "0")),
                 job=os.environ.get("SLURM_JOB_ID"), hosts=os.environ.get("SLURM_JOB_NODELIST"))

    def batch(self, step: int) -> tuple[jax.Array, jax.Array]:
        import jax

        # Depends on (seed, step, rank) only: a resumed run sees the batches it would have.
        T = self.model.T
        rng = np.random.default_rng([self.args.seed, step, self.rank])
        starts = rng.integers(0, len(self.tokens) - T - 1, size=self.args.batch)
        x = np.stack([self.tokens[s:s + T] for s in starts])
        y = self.tokens[starts + T]
        return (jax.make_array_from_process_local_data(self.by_rank, x),
                jax.make_array_from_process_local_data(self.by_rank, y))

    def rate(self, step: int) -> float | None:
        """Steps per second since the end of this run's first step (checkpoints included)."""
        elapsed = time.monotonic() - self.began
        return (round((step - self.start - 1) / elapsed, 2)
                if step > self.start + 1 and elapsed else None)

    def checkpoint(self, step: int, why: str = "periodic") -> None:
        from jax.experimental import multihost_utils

        if self.rank == 0:
            arrays = {**{f"p/{k}": a for k, a in self.to_host(self.params).items()},
                      **{f"m/{k}": a for k, a in self.to_host(self.m).items()},
                      **{f"v/{k}": a for k, a in self.to_host(self.v).items()}}
            save_checkpoint(self.ckpt_dir, step, arrays, self.args.keep, why)
            emit(event="checkpoint", step=step, why=why)
        multihost_utils.sync_global_devices(f"checkpoint {step}")

    def train(self, step: int, signalled: int) -> int:
        """One step on every rank; the signal any rank had (0: none)."""
        import jax
        import jax.numpy as jnp

        args = self.args
        x, y = self.batch(step)
        flags = jax.make_array_from_process_local_data(
            self.by_rank, np.array([signalled], np.int32))
        self.params, self.m, self.v, loss, stop_any = self.step_fn(
            self.params, self.m, self.v, jnp.int32(step), x, y, flags)
        if step == self.start + 1:
            emit(event="params", rank=self.rank, step=step,
                 sha256=digest(list(self.to_host(self.params).values())))
            self.began = time.monotonic()
        if self.rank == 0 and (step % args.log_every == 0
                               or step in (self.start + 1, args.steps)):
            emit(event="step", step=step, loss=round(float(loss.addressable_data(0)), 4),
                 steps_per_s=self.rate(step))
        return int(stop_any.addressable_data(0))

    def stopped(self, step: int, signum: int) -> int:
        """The exit code after a stop by ``signum`` (its checkpoint written)."""
        import jax

        name = signal.Signals(signum).name
        if self.rank == 0:
            if signum == signal.SIGUSR1 and self.args.stop_record:
                record_stop(self.args.stop_record, step, name)
            emit(event="stopped", step=step, signal=name)
        jax.distributed.shutdown()
        # SIGTERM: 143, like a process it killed (requeue, preemption: Slurm goes on as
        # it decided). SIGUSR1: 0 on every rank, the stop is in --stop-record; a
        # non-zero exit would make srun kill the ranks still shutting down. The next
        # run resumes at step + 1.
        return 128 + signum if signum == signal.SIGTERM else 0

    def finished(self, step: int) -> int:
        import jax

        emit(event="params", rank=self.rank, step=step,
             sha256=digest(list(self.to_host(self.params).values())))
        if self.rank == 0:
            emit(event="end", step=step, steps_per_s=self.rate(step))
        jax.distributed.shutdown()
        return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = {"signal": 0}

    def on_signal(signum: int, _frame: object) -> None:
        stop["signal"] = max(stop["signal"], signum)  # acted on between steps, by every rank

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    # JAX's own preemption service takes SIGTERM for itself (our handler would never run);
    # the stop flag below does its job, for SIGUSR1 too.
    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize()
    # Auto: XLA decides where the gradients are reduced (jax.make_mesh's default, Explicit,
    # wants every intermediate's sharding spelled out).
    mesh = jax.make_mesh((jax.device_count(),), ("data",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    shardings = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    vocab, tokens = read_tokens(args.data)
    if len(tokens) <= args.context + 1:
        print(f"train_charlm: {args.data} has {len(tokens)} characters, it needs more than "
              f"{args.context + 1}", file=sys.stderr)
        return 2
    model = Model(len(vocab), args.context, args.embed, args.hidden, args.lr)
    run = Trainer(args, model, tokens, shardings)
    run.resume()
    step = run.start
    while step < args.steps:
        step += 1
        signum = run.train(step, stop["signal"])
        if signum:
            # Stopping: a stop signal that comes again (Slurm delivering it twice, the
            # time-limit warning after a requeue's SIGTERM) must not kill the rank on its
            # way out, once Python has put the default action back at exit; Slurm's
            # SIGKILL still ends a rank that hangs.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            run.checkpoint(step, signal.Signals(signum).name)
            return run.stopped(step, signum)
        if step % args.checkpoint_every == 0 or step == args.steps:
            run.checkpoint(step)
    return run.finished(step)


if __name__ == "__main__":
    sys.exit(main())
