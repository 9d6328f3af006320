"""The process: which device, which ranks, how many threads, which random state, and when to stop.

Everything here is about the Python process that runs a command, not about models or data, so training,
generation, the length experiment and the benchmarks share one copy:

- `resolve_device`: `auto` picks CUDA when available; asking for a device that is not there is a UserError.
- `Dist` / `init_distributed`: the process group torchrun describes (gloo on CPU, NCCL on CUDA).
- (How the process stops on a signal is `octlm.signals`, which imports no torch, so the CLI can use it.)
- `autocast`: the mixed-precision context for a device and `train.dtype` (`auto`: bf16 on CUDA, none on CPU).
- `cpu_bf16_support`: what the processor offers for bf16 (AMX, AVX512-BF16 or none), read from its flags.
- `seed_rank_streams`: after the model is built, each DDP rank draws its own dropout masks.
- `rng_state` / `rank_rng_states` / `restore_rng`: the random state a checkpoint carries (every rank's), so a
  resume is bit-identical.
- `torch_threads`: run with a given number of torch CPU threads, then restore the previous count;
  `cpu_share`: octlm's default, the cores of this process that other processes leave idle, measured.
- `in_processes`: jobs in a pool of fresh worker processes, a stop signal to this one passed on to them;
  `process_alive`: whether a process id is in use (a temporary file's writer may be gone).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from octlm.errors import UserError
from octlm.signals import Stopped

T, R = TypeVar("T"), TypeVar("R")


def resolve_device(name: str, setting: str = "train.device") -> torch.device:
    """`auto` picks CUDA when available; an unknown name, or CUDA (or a CUDA index) this machine lacks, is a
    UserError naming `setting`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d{1,4})?", name):
        raise UserError(f"{setting} = {name!r} is unknown; choose auto, cpu, cuda or cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{setting} = {name!r} but CUDA is not available here; use --device cpu or auto")
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise UserError(
            f"{setting} = {name!r} but this machine has {count} CUDA device(s): cuda:0 .. cuda:{count - 1}"
        )
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
        return self.max(int(flag), device) > 0

    def max(self, value: int, device: torch.device) -> int:
        """The largest `value` over the ranks (a signal number: every rank stops on the same step for it)."""
        if self.world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.int64, device=device)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
        return int(tensor.item())

    def gather(self, tensor: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
        """Every rank's `tensor` (same shape and dtype on every rank), in rank order, on the CPU."""
        if self.world == 1:
            return [tensor.cpu()]
        local = tensor.to(device)
        parts = [torch.empty_like(local) for _ in range(self.world)]
        torch.distributed.all_gather(parts, local)
        return [part.cpu() for part in parts]

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


def autocast(device: torch.device, dtype: str = "auto") -> contextlib.AbstractContextManager:
    """The mixed-precision context for `train.dtype` (`config.DTYPES`): `bf16` and `bf16-autocast` are
    bfloat16 autocast on any device, `fp32` none, `auto` bf16 on CUDA and fp32 on CPU (where many processors
    lack bf16 instructions). Weights, gradients and optimizer state stay float32 under autocast. (How `bf16`
    trains, through a bf16 copy of the weights, is `octlm.training.precision`; evaluation uses this
    context.)"""
    if dtype in ("bf16", "bf16-autocast") or (dtype == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if dtype not in ("auto", "fp32"):
        raise UserError(f"train.dtype = {dtype!r} is unknown; choose auto, fp32, bf16 or bf16-autocast")
    return contextlib.nullcontext()


@dataclass(frozen=True)
class BF16Support:
    """What the processor offers for bfloat16 matmuls: `kind` is AMX, AVX512-BF16 or none."""

    kind: str
    detail: str  # what was detected, in words, for the notice and the benchmark

    @property
    def native(self) -> bool:
        return self.kind != "none"


def bf16_support_from_flags(flags: str, capability: str = "") -> BF16Support:
    """Read a `/proc/cpuinfo` flags line (x86): `amx_bf16` (AMX tiles, Sapphire Rapids on) beats `avx512_bf16`
    (dot-product instructions, e.g. Cooper Lake, Zen 4); without either, oneDNN converts bf16 to fp32 and back
    around fp32 arithmetic. `capability`: torch's vector ISA (`torch.backends.cpu.get_cpu_capability()`)."""
    found = set(flags.split())
    isa = f"; torch CPU capability {capability}" if capability else ""
    if "amx_bf16" in found:
        return BF16Support("AMX", f"amx_bf16 in the CPU flags{isa}")
    if "avx512_bf16" in found:
        return BF16Support("AVX512-BF16", f"avx512_bf16 in the CPU flags, no amx_bf16{isa}")
    return BF16Support("none", f"neither amx_bf16 nor avx512_bf16 in the CPU flags{isa}")


def cpu_bf16_support(cpuinfo: Path = Path("/proc/cpuinfo")) -> BF16Support:
    """This machine's bf16 support, detected from the first `flags` line of `cpuinfo` (Linux)."""
    capability = torch.backends.cpu.get_cpu_capability()
    try:
        lines = cpuinfo.read_text(errors="replace").splitlines()
    except OSError as error:
        return BF16Support(
            "none", f"{cpuinfo} is unreadable ({error.strerror or error}), so nothing was detected"
        )
    flags = next((line.split(":", 1)[1] for line in lines if line.startswith("flags")), None)
    if flags is None:
        return BF16Support("none", f"{cpuinfo} lists no CPU flags, so nothing was detected")
    return bf16_support_from_flags(flags, capability)


def seed_rank_streams(seed: int, dist: Dist) -> None:
    """Give each DDP rank its own dropout stream, after the model is built (so the weights stay identical).

    Rank 0 keeps the stream `torch.manual_seed(seed)` started, so one process is unchanged; rank r > 0 is
    reseeded from (seed, r). With dropout > 0, N ranks thus draw N independent masks, as one process with
    batch N·B does for its N slices (the same distribution, not the same numbers).
    """
    if dist.rank > 0:
        torch.manual_seed((seed * 1_000_003 + dist.rank) % 2**63)


def rng_state(generator: torch.Generator, device: torch.device) -> dict[str, Any]:
    """The global torch RNG, the batch generator and (on CUDA) the device RNG, as byte tensors."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "batches": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def rank_rng_states(device: torch.device, dist: Dist) -> list[dict[str, torch.Tensor]] | None:
    """Every rank's own (dropout) streams in rank order, or None in one process. Every rank must call it."""
    if dist.world == 1:
        return None
    states: list[dict[str, torch.Tensor]] = [{"torch": t} for t in dist.gather(torch.get_rng_state(), device)]
    if device.type == "cuda":
        for entry, cuda in zip(states, dist.gather(torch.cuda.get_rng_state(device), device), strict=True):
            entry["cuda"] = cuda
    return states


def restore_rng(
    state: dict[str, Any],
    generator: torch.Generator,
    device: torch.device,
    dist: Dist | None = None,
    ranks: Any = None,
) -> None:
    """Put back what `rng_state` saved, and this rank's own streams from `ranks` (`rank_rng_states`) when
    they were saved by the same number of ranks. A missing or malformed state is a UserError."""
    try:
        torch.set_rng_state(state["torch"])
        generator.set_state(state["batches"])
        if device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], device)
        if dist is not None and dist.world > 1:
            if isinstance(ranks, list) and len(ranks) == dist.world:
                torch.set_rng_state(ranks[dist.rank]["torch"])
                if device.type == "cuda" and "cuda" in ranks[dist.rank]:
                    torch.cuda.set_rng_state(ranks[dist.rank]["cuda"], device)
            elif dist.rank > 0:  # saved by another world size: a stream of its own all the same
                torch.manual_seed(int(torch.randint(0, 2**62, (1,))) + dist.rank)
    except (KeyError, TypeError, RuntimeError) as error:
        raise UserError(
            f"the checkpoint's random-generator states are missing or invalid ({error})"
        ) from None


# How long `cpu_share` watches the processor: 25 clock ticks per core at Linux's 100 Hz, short beside any
# command that computes, long enough that one busy process shows as most of a core.
SAMPLE_SECONDS = 0.25
PROC_STAT = Path("/proc/stat")
# torch's own default (physical cores, or OMP_NUM_THREADS), read before octlm sets any count.
TORCH_THREADS = torch.get_num_threads()


@dataclass(frozen=True)
class CpuShare:
    """The cores this process may use (`cores`), how many of them other processes kept busy (`busy`, in cores,
    measured), and the torch threads octlm uses by default (`threads`): the idle ones, at least one."""

    cores: int
    busy: float
    threads: int

    @property
    def crowded(self) -> bool:
        """Whether other processes left fewer cores than torch would have used."""
        return self.threads < self.cores

    def note(self, what: str) -> str:
        return (
            f"note: the machine is busy (other processes keep {self.busy:.1f} of {self.cores} cores busy), "
            f"so {what} uses {self.threads} thread{'s' * (self.threads > 1)}: more threads than idle cores "
            "wait on each other; --threads N to choose"
        )


def _cpu_times(stat: Path, cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of the CPUs `cpus` since boot, from /proc/stat's `cpuN` lines."""
    busy = total = 0
    for line in stat.read_text().splitlines():
        name, *ticks = line.split()
        if not (name.startswith("cpu") and name[3:].isdecimal() and int(name[3:]) in cpus):
            continue
        values = [int(t) for t in ticks[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(values)
        busy += sum(values) - values[3] - values[4]
    return (busy, total) if total else None


def cpu_share(
    sample: float = SAMPLE_SECONDS, stat: Path = PROC_STAT, local_processes: int | None = None
) -> CpuShare:
    """How many torch threads fit beside what else runs: this process's cores (its affinity, at most torch's
    own default) less the cores other processes kept busy over `sample` seconds (read from `stat` while this
    process sleeps, so it counts only others), split among the `local_processes` of a torchrun launch on this
    machine (default: LOCAL_WORLD_SIZE). Where /proc/stat cannot be read, the 1-minute load average stands in;
    OMP_NUM_THREADS, where set, is the user's choice and is kept."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cores = max(1, min(len(cpus), TORCH_THREADS))
    if "OMP_NUM_THREADS" in os.environ:  # the user's choice, as torch itself reads it
        return CpuShare(cores=cores, busy=0.0, threads=cores)
    try:
        first = _cpu_times(stat, cpus)
        time.sleep(sample)
        second = _cpu_times(stat, cpus)
        if first is None or second is None or second[1] <= first[1]:
            raise ValueError("no ticks")
        busy = len(cpus) * (second[0] - first[0]) / (second[1] - first[1])
    except (OSError, ValueError):
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    processes = local_processes or int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    idle = max(0, round(len(cpus) - busy))
    threads = max(1, min(cores, idle) // max(1, processes))
    return CpuShare(cores=max(1, cores // max(1, processes)), busy=round(busy, 2), threads=threads)


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run with `count` torch CPU threads (None: `cpu_share().threads`), then restore the previous count."""
    if count is not None and count < 1:
        raise UserError(f"--threads {count} must be at least 1")
    before = torch.get_num_threads()
    torch.set_num_threads(count if count is not None else cpu_share().threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def process_alive(pid: int) -> bool:
    """Whether a process with id `pid` exists on this machine (another user's counts too)."""
    if pid <= 0:
        return False  # 0 and -1 would signal a process group or every process
    try:
        os.kill(pid, 0)  # signal 0: checks only
    except PermissionError:
        return True
    except (ProcessLookupError, OverflowError):
        return False
    return True


def in_processes(fn: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """`fn(item)` for every item, in `workers` worker processes, yielded as each finishes.

    The workers are spawned, not forked: a fork after torch has started its threads can hang. Only as many
    jobs as workers are handed out at a time, so a job a signal stopped is never followed by one more. A
    SIGTERM or SIGHUP to this process alone (raised as `signals.Stopped`) is passed on to the workers, so each
    stops as it would on its own (a training after its step, checkpoint written); this process waits for
    them, then the signal goes on. A second one reaches them too and ends the wait. Ctrl-C from a terminal
    reaches every worker by itself.
    """
    pending = iter(items)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        running = {pool.submit(fn, item) for item in itertools.islice(pending, workers)}
        try:
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                running |= {pool.submit(fn, item) for item in itertools.islice(pending, len(done))}
                for future in done:
                    yield future.result()
        except Stopped as stop:
            _signal_workers(stop.signum)
            try:
                wait(running)
            except Stopped as again:
                _signal_workers(again.signum)
                raise
            raise


def _signal_workers(signum: int) -> None:
    for worker in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(worker.pid, signum)
