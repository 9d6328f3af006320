"""Shared test settings.

The suite runs on 2-core machines, often two test workers at once: one torch thread per process avoids the
threads of one process waiting on each other (measured 3-15x slower on a busy 2-core machine).
"""

import torch

torch.set_num_threads(1)
