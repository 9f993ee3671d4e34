"""Build ggml's CPU backend once per CPU, from the llama-cpp-python sdist, with our torch ops.

ggml is the reference implementation of GGUF's block formats, with vector kernels for every
instruction set. Its source comes vendored in the `llama-cpp-python` sdist on PyPI (MIT, the
same source `bench/build_llama_server.sh` builds `llama-server` from); the first build downloads
the sdist, compiles ggml's base and CPU libraries with `-march=native` (static, no OpenMP: the
ops run on torch's thread pool), links `ggml_csrc/ggml_ops.cpp` against them and caches the
result under `<cache>/ggml/<key>/`. Without cmake, a compiler or the sdist, the library is
unavailable and a GGUF whose tensors need it is refused at startup, naming them.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

from worker.kernels.build import (
    KernelBuildError,
    build_once,
    compiler_command,
    compiler_flags,
    torch_dirs,
)
from worker.machine.cpu_info import cpu_signature
from worker.machine.paths import cache_root

log = logging.getLogger(__name__)

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
PROJECT = Path(__file__).parent / "ggml_csrc"  # CMakeLists.txt: ggml as a subproject
SOURCE = PROJECT / "ggml_ops.cpp"
LIBRARY_NAME = "libastrai_ggml.so"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
    "-DGGML_OPENMP=OFF",
    "-DGGML_LLAMAFILE=OFF",
    "-DGGML_CCACHE=OFF",
    "-DGGML_BUILD_TESTS=OFF",
    "-DGGML_BUILD_EXAMPLES=OFF",
)


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout)[-4000:]
        raise KernelBuildError(f"{what} failed:\n{tail}")


def _ggml_source() -> Path:
    """ggml's folder inside the sdist, downloaded and unpacked once."""
    version = LLAMA_CPP_PYTHON_VERSION
    for root in sorted((cache_root() / "llama.cpp").glob(f"{version}*/src")):
        if (root / "vendor" / "llama.cpp" / "ggml" / "CMakeLists.txt").is_file():
            return root / "vendor" / "llama.cpp" / "ggml"
    target = cache_root() / "ggml" / f"src-{version}"
    ggml = target / "ggml"
    if (ggml / "CMakeLists.txt").is_file():
        return ggml
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".src-", dir=target.parent))
    try:
        log.info("downloading the llama-cpp-python %s sdist for ggml's source (once)", version)
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        pip += ["--no-binary", ":all:", "-d", str(staging), f"llama_cpp_python=={version}"]
        _run(pip, "downloading the llama-cpp-python sdist")
        archive = next(staging.glob("llama_cpp_python-*.tar.gz"))
        marker = "/vendor/llama.cpp/ggml/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if marker in m.name]
            for member in members:
                member.name = "ggml/" + member.name.split(marker, 1)[1]
            tar.extractall(staging / "out", members=members, filter="data")
        (staging / "out").rename(target)
    except OSError:
        if not (ggml / "CMakeLists.txt").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ggml


def _isa_cflags() -> str:
    """What worker.kernels.build leaves out (AMX; AVX-512 under ASTRAI_KERNEL_ISA=avx2), and
    AMX always: llama.cpp's AMX kernels die with SIGILL on some AMX VMs in this version."""
    flags = [f for f in compiler_flags() if f.startswith("-mno-")]
    for flag in ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"):
        if flag not in flags:
            flags.append(flag)
    return " ".join(flags)


def _libraries_key() -> str:
    """What ggml's static libraries depend on: the CPU, the source version and the flags."""
    digest = hashlib.sha256()
    digest.update(f"{cpu_signature()}|{LLAMA_CPP_PYTHON_VERSION}".encode())
    digest.update(" ".join((*CMAKE_OPTIONS, _isa_cflags(), *compiler_flags())).encode())
    digest.update((PROJECT / "CMakeLists.txt").read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def build_key() -> str | None:
    """The ops library's key: ggml's libraries, torch's version and the ops' source."""
    compiler = compiler_command()
    if compiler is None or shutil.which("cmake") is None:
        return None
    digest = hashlib.sha256()
    digest.update(f"{_libraries_key()}|{torch.__version__}".encode())
    digest.update(SOURCE.read_bytes())
    return digest.hexdigest()[:16]


def _libraries(ggml: Path) -> tuple[Path, Path]:
    """(libggml-cpu.a, libggml-base.a), built once per CPU and flags (~1.5 min on 2 cores)."""
    folder = cache_root() / "ggml" / f"libs-{_libraries_key()}"
    names = ("libggml-cpu.a", "libggml-base.a")
    if all((folder / name).is_file() for name in names):
        return folder / names[0], folder / names[1]
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".libs-", dir=folder.parent))
    try:
        flags = _isa_cflags()
        configure = ["cmake", "-S", str(PROJECT), "-B", str(staging / "build"), *CMAKE_OPTIONS]
        configure.append(f"-DGGML_SOURCE={ggml}")
        configure += [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        _run(configure, "configuring ggml")
        jobs = str(os.cpu_count() or 1)
        build = ["cmake", "--build", str(staging / "build"), "--target", "ggml-cpu", "ggml-base"]
        _run([*build, "-j", jobs], "building ggml")
        archives = {p.name: p for p in (staging / "build").rglob("libggml-*.a")}
        if not set(names) <= archives.keys():
            raise KernelBuildError(f"ggml's build made {sorted(archives)}, not its CPU libraries")
        (staging / "out").mkdir()
        for name in names:
            shutil.copy2(archives[name], staging / "out" / name)
        try:
            (staging / "out").rename(folder)
        except OSError:
            if not all((folder / name).is_file() for name in names):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / names[0], folder / names[1]


def _compile(compiler: str, ggml: Path, target: Path) -> None:
    cpu_archive, base_archive = _libraries(ggml)
    includes, lib_dir = torch_dirs()
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    obj = target.parent / "ggml_ops.o"
    cmd = [compiler, *compiler_flags(), abi, *(f"-I{d}" for d in includes)]
    cmd += [f"-I{ggml / 'include'}", "-c", str(SOURCE), "-o", str(obj)]
    _run(cmd, "compiling ggml_ops.cpp")
    link = [compiler, "-shared", str(obj), str(cpu_archive), str(base_archive)]
    link += [f"-L{lib_dir}", "-ltorch_cpu", "-lc10", "-lpthread", "-lm", "-o", str(target)]
    _run(link, "linking the ggml ops")
    obj.unlink()


def build_library() -> Path:
    """The cached library for this CPU, built first if needed; KernelBuildError if it can't."""
    compiler, key = compiler_command(), build_key()
    if compiler is None or key is None:
        raise KernelBuildError("building ggml needs cmake and a C++ compiler (g++)")
    folder = cache_root() / "ggml" / key
    library = folder / LIBRARY_NAME
    if library.is_file():
        return library
    ggml = _ggml_source()
    return build_once(
        library,
        "ggml's CPU kernels for this machine (once, ~1.5 min)",
        lambda target: _compile(compiler, ggml, target),
    )


@functools.cache
def ggml_kernels_available() -> bool:
    """Build (once per CPU) and load ggml's kernels; False, with a warning, if impossible."""
    if os.environ.get("ASTRAI_GGML_KERNELS", "1") == "0":
        log.info("ggml's CPU kernels disabled by ASTRAI_GGML_KERNELS=0")
        return False
    try:
        torch.ops.load_library(str(build_library()))  # type: ignore[no-untyped-call]
    except (KernelBuildError, OSError, RuntimeError, StopIteration) as exc:
        log.warning("ggml's CPU kernels unavailable: %s", exc)
        return False
    from worker.kernels import ggml_fake_ops  # noqa: F401 - shapes for torch.compile

    return True


def ggml_isa() -> str | None:
    """The instructions ggml's kernels were compiled with here, or None without them."""
    if not ggml_kernels_available():
        return None
    return str(torch.ops.astrai_ggml.isa())


def main() -> None:
    """`python -m worker.kernels.ggml_build`: build now (make install does), say what happened."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if ggml_kernels_available():
        print(f"ggml CPU kernels ready ({ggml_isa()}): {build_library()}")
    else:
        print("ggml CPU kernels unavailable here; GGUF files need Q4_1/Q8_0/F16/BF16/F32 weights")


if __name__ == "__main__":
    main()
