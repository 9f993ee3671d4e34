"""Build the native CPU kernels once per CPU and torch version, cache the library, load it.

The C++ sources in `csrc/` are compiled with `-march=native`, so they use exactly the
instructions of the machine they run on (AVX2, AVX-512, VNNI), and the result is cached
under `<cache>/kernels/<key>/`, the key covering the CPU's model and flags, torch's version,
the compiler and the sources. A machine without a C++ compiler, or with
`ASTRAI_NATIVE_KERNELS=0`, gets None: the engine then uses torch's own kernels.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from worker.machine.cache_folder import made_once
from worker.machine.cpu_info import cpu_signature
from worker.machine.paths import cache_root

log = logging.getLogger(__name__)

SOURCES = Path(__file__).parent / "csrc"
LIBRARY_NAME = "libastrai_kernels.so"
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-std=c++20", "-w")
# ASTRAI_KERNEL_ISA=avx2 leaves out AVX-512 (and with it AMX) on a CPU that has it: the
# 16-lane kernels (csrc/wide_direct_kernel.h, wide_panel_kernel.h) against the 8-lane ones,
# on one machine; =avx512 leaves out AMX (csrc/amx_panel_kernel.h).
_NO_AMX = ("-mno-amx-tile", "-mno-amx-bf16", "-mno-amx-int8")
ISA_FLAGS = {"native": (), "avx512": _NO_AMX, "avx2": ("-mno-avx512f", *_NO_AMX)}


class KernelBuildError(RuntimeError):
    """The native kernels could not be compiled or loaded here."""


def compiler_command() -> str | None:
    """The C++ compiler to build with (CXX, else c++, g++ or clang++), or None."""
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def compiler_flags() -> tuple[str, ...]:
    """-O3 -march=native and the rest, less what ASTRAI_KERNEL_ISA leaves out."""
    isa = os.environ.get("ASTRAI_KERNEL_ISA", "native")
    if isa not in ISA_FLAGS:
        raise KernelBuildError(f"ASTRAI_KERNEL_ISA must be one of {sorted(ISA_FLAGS)}, got {isa!r}")
    return FLAGS + ISA_FLAGS[isa]


def _compiler_version(compiler: str) -> str:
    result = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.splitlines()[0] if result.stdout else compiler


def torch_dirs() -> tuple[list[Path], Path]:
    """(include folders, library folder) of the torch this runs under."""
    root = Path(torch.__file__).parent
    return [root / "include", root / "include" / "torch" / "csrc" / "api" / "include"], root / "lib"


def _build_key(compiler: str, sources: list[Path]) -> str:
    digest = hashlib.sha256()
    digest.update(f"{cpu_signature()}|{torch.__version__}|{_compiler_version(compiler)}".encode())
    digest.update(" ".join(compiler_flags()).encode())
    for source in sources:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def _compile(compiler: str, sources: list[Path], target: Path) -> None:
    includes, lib_dir = torch_dirs()
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    python_include = sysconfig.get_paths()["include"]
    common = [*compiler_flags(), abi, *(f"-I{d}" for d in includes), f"-I{python_include}"]

    def compile_one(source: Path) -> Path:
        obj = target.parent / f"{source.stem}.o"
        cmd = [compiler, *common, "-c", str(source), "-o", str(obj)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise KernelBuildError(f"compiling {source.name} failed:\n{result.stderr[-4000:]}")
        return obj

    with ThreadPoolExecutor(max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        objects = list(pool.map(compile_one, sources))
    link = [compiler, "-shared", "-fopenmp", *map(str, objects), f"-L{lib_dir}"]
    link += ["-ltorch_cpu", "-lc10", "-o", str(target)]
    result = subprocess.run(link, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise KernelBuildError(f"linking the kernels failed:\n{result.stderr[-4000:]}")


@functools.cache
def build_key() -> str | None:
    """What the library is keyed by (CPU, torch, compiler, sources); None without a compiler."""
    compiler = compiler_command()
    if compiler is None:
        return None
    return _build_key(compiler, sorted(SOURCES.glob("*.[ch]*")))


def build_library() -> Path:
    """The cached library for this CPU, compiled first if needed; KernelBuildError if it can't."""
    compiler, key = compiler_command(), build_key()
    if compiler is None or key is None:
        raise KernelBuildError("no C++ compiler found (set CXX, or install g++)")
    sources = sorted(SOURCES.glob("*.cpp"))
    folder = cache_root() / "kernels" / key
    library = folder / LIBRARY_NAME
    if library.is_file():
        return library
    return build_once(
        library,
        "the native CPU kernels for this machine (once, ~30 s)",
        lambda target: _compile(compiler, sources, target),
    )


def build_once(library: Path, what: str, make: Callable[[Path], None]) -> Path:
    """`library` (`<cache>/<…>/<key>/<name>`), made by `make(path)` once (made_once: workers
    starting together never load half a file)."""

    def build(folder: Path) -> None:
        start = time.monotonic()
        log.info("compiling %s", what)
        make(folder / library.name)
        log.info("built in %.1f s: %s", time.monotonic() - start, library)

    made_once(library.parent, library.name, build)
    return library


@functools.cache
def native_kernels_available() -> bool:
    """Build (once per CPU) and load the native kernels; False, with a warning, if impossible."""
    if os.environ.get("ASTRAI_NATIVE_KERNELS", "1") == "0":
        log.info("native CPU kernels disabled by ASTRAI_NATIVE_KERNELS=0")
        return False
    try:
        torch.ops.load_library(str(build_library()))  # type: ignore[no-untyped-call]
    except (KernelBuildError, OSError, RuntimeError) as exc:
        log.warning("native CPU kernels unavailable, using torch's kernels: %s", exc)
        return False
    from worker.kernels import fake_ops  # noqa: F401 - shapes for torch.compile

    return True


@functools.cache
def prefill_attention_available() -> bool:
    """Whether `astrai::prefill_attention` computes here (the native kernels, with AVX-512)."""
    return native_kernels_available() and bool(torch.ops.astrai.prefill_attention_available())


def kernel_isa() -> str | None:
    """Which instructions the block kernels run on here ("AVX-512", "AMX tiles ..."), or None
    without native kernels: compiled in by -march=native and, for AMX, granted by Linux."""
    if not native_kernels_available():
        return None
    return str(torch.ops.astrai.block_kernel_isa())


def int8_block_kernels_available() -> bool:
    """Whether our Q4_1 / Q8_0 kernels take 8-bit activations here (csrc/int8_kernel.h: AVX2
    and up); elsewhere a GGUF's precision file goes through ggml's kernels for those types."""
    return kernel_isa() not in (None, "scalar")


def main() -> None:
    """`python -m worker.kernels.build`: build now (make install does), say what happened."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if native_kernels_available():
        print(f"native CPU kernels ready ({kernel_isa()}): {build_library()}")
    else:
        print("native CPU kernels unavailable here; the engine will use torch's kernels")


if __name__ == "__main__":
    main()
