"""The worker: engine, KV cache, model and kernels, and the process that serves them."""

from worker.machine.openmp_wait import set_openmp_wait

set_openmp_wait()  # before torch is imported by anything of ours
