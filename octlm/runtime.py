"""The process: which device, which ranks, how many threads, which random state, and when to stop.

Everything here is about the Python process that runs a command, not about models or data, so training,
generation, the length experiment and the benchmarks share one copy:

- `resolve_device`: `auto` picks CUDA when available; asking for a device that is not there is a UserError.
- `Dist` / `init_distributed`: the process group torchrun describes (gloo on CPU, NCCL on CUDA).
- `StopRequest`: turns the first Ctrl-C into a request to stop after the current step.
- `autocast`: the mixed-precision context for a device (bf16 on CUDA, none on CPU).
- `rng_state` / `restore_rng`: the random state a checkpoint carries, so a resume is bit-identical.
- `torch_threads`: run with a given number of torch CPU threads, then restore the previous count.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from octlm.errors import UserError


def resolve_device(name: str, setting: str = "train.device") -> torch.device:
    """`auto` picks CUDA when available; asking for CUDA without it is a UserError naming `setting`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{setting} = {name!r} but CUDA is not available here; use --device cpu or auto")
    return torch.device(name)


@dataclass
class Dist:
    """This process's place among the ranks; one process is rank 0 of a world of 1."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owned: bool = False  # this process initialized the process group and must destroy it

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def all_mean(self, value: torch.Tensor) -> torch.Tensor:
        """`value` averaged over the ranks (itself in a single process)."""
        if self.world > 1:
            torch.distributed.all_reduce(value)
            value /= self.world
        return value

    def any(self, flag: bool, device: torch.device) -> bool:
        """True when any rank passes True: ranks must agree on stopping, or one waits forever."""
        if self.world == 1:
            return flag
        tensor = torch.tensor([float(flag)], device=device)
        torch.distributed.all_reduce(tensor)
        return bool(tensor.item() > 0)

    def close(self) -> None:
        if self.owned:
            torch.distributed.destroy_process_group()


def init_distributed(device: torch.device) -> Dist:
    """Join the process group torchrun describes in RANK / WORLD_SIZE (gloo on CPU, NCCL on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if device.type == "cuda":
        torch.cuda.set_device(local)
    owned = False
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        owned = True
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local, owned=owned)


class StopRequest:
    """Turns the first Ctrl-C into a request to stop after the current step; a second one aborts at once.

    Installed only on the main thread (Python delivers signals there); elsewhere it never fires. On exit the
    handler that was there before (default, ignored under nohup, or a caller's own) comes back.
    """

    def __init__(self, say: Callable[[str], None]) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False
        self._say = say

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, self._previous)
        self._say("interrupt: finishing this step and writing a checkpoint (Ctrl-C again to abort now)")

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on CUDA; float32 on CPU (where bf16 matmuls are slow and resume must be exact)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def rng_state(generator: torch.Generator, device: torch.device) -> dict[str, Any]:
    """The global torch RNG, the batch generator and (on CUDA) the device RNG, as byte tensors."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "batches": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], generator: torch.Generator, device: torch.device) -> None:
    """Put back what `rng_state` saved; a missing or malformed state is a UserError."""
    try:
        torch.set_rng_state(state["torch"])
        generator.set_state(state["batches"])
        if device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], device)
    except (KeyError, TypeError, RuntimeError) as error:
        raise UserError(
            f"the checkpoint's random-generator states are missing or invalid ({error})"
        ) from None


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run with `count` torch CPU threads (None: torch's choice), then restore the previous count."""
    if count is not None and count < 1:
        raise UserError(f"--threads {count} must be at least 1")
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
