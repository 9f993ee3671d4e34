"""The block kernels run on the widest instructions this CPU and its kernel grant."""

from __future__ import annotations

import os
import platform

from tests.worker.native import needs_native_kernels
from worker.kernels.build import kernel_isa
from worker.machine.cpu_info import cpu_flags

pytestmark = needs_native_kernels

AMX_FLAGS = {"amx_tile", "amx_bf16", "avx512_bf16", "avx512bw"}


def linux_grants_amx() -> bool:
    # Linux 5.16 added the request for the tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
    if platform.system() != "Linux":
        return False
    major, minor = (int(part) for part in platform.release().split(".")[:2])
    return (major, minor) >= (5, 16)


def test_the_kernels_report_the_instructions_they_were_built_for():
    isa = kernel_isa()
    flags = cpu_flags()
    native = os.environ.get("ASTRAI_KERNEL_ISA", "native") == "native"
    if native and flags >= AMX_FLAGS and linux_grants_amx():
        assert isa is not None and isa.startswith("AMX tiles")
    else:
        assert isa is not None and "AMX" not in isa
    if "avx512f" in flags and os.environ.get("ASTRAI_KERNEL_ISA", "native") != "avx2":
        assert isa.endswith("AVX-512")
    elif "avx2" in flags:
        assert isa == "AVX2"
