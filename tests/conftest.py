"""Test-wide setup. Triton kernels run on a CPU only through its interpreter, and the switch must
be set before anything imports triton (torch's compiler and the tests' modules do)."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Two torch threads on a shared 2-core machine make the tiny model's many small ops several times
# slower; the tests measure correctness, not speed.
torch.set_num_threads(1)
