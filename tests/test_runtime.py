"""The runtime (octlm/runtime.py): whether a process is alive. Its bf16 support and autocast are
tests/test_runtime_bf16.py."""

from __future__ import annotations

import os
import subprocess

import torch
from tiny import PYTHON

from octlm.runtime import Dist, process_alive, restore_rng, rng_state


def test_process_alive() -> None:
    child = subprocess.Popen([PYTHON, "-c", "pass"])
    child.wait()
    assert process_alive(os.getpid()) and process_alive(1)  # ours, and init's (another user's counts too)
    assert not process_alive(child.pid)  # exited and reaped (its id is not reused this soon)
    assert not process_alive(0) and not process_alive(-1) and not process_alive(2**40)


def _stream_after_restore(rank: int, world: int, ranks: object) -> torch.Tensor:
    """The first dropout draws of `rank` after a resume of a checkpoint saved with `ranks` (None: one process)."""
    torch.manual_seed(5)
    generator = torch.Generator().manual_seed(6)
    state = rng_state(generator, torch.device("cpu"))
    torch.manual_seed(999)  # whatever ran before the resume
    restore_rng(state, generator, torch.device("cpu"), Dist(rank=rank, world=world), ranks)
    return torch.rand(16)


def test_a_resume_with_another_world_size_gives_every_rank_its_own_stream() -> None:
    torch.manual_seed(5)
    saved_global = torch.rand(16)
    two_ranks = [{"torch": torch.manual_seed(s).get_state()} for s in (7, 8)]
    for saved in (None, two_ranks):  # saved by one process, or by two; resumed by three
        streams = [_stream_after_restore(rank, 3, saved) for rank in range(3)]
        assert torch.equal(streams[0], saved_global)  # rank 0 continues the saved global stream
        for a in range(3):
            for b in range(a + 1, 3):
                assert not torch.equal(streams[a], streams[b]), (saved is None, a, b)


def test_a_resume_with_the_same_world_size_restores_each_ranks_own_stream() -> None:
    two_ranks = [{"torch": torch.manual_seed(s).get_state()} for s in (7, 8)]
    for rank, seed in enumerate((7, 8)):
        expected = torch.rand(16, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(_stream_after_restore(rank, 2, two_ranks), expected)
