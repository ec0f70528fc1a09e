"""Compile ``onednn_conv.cc`` into ``libonednn_conv.so`` beside it (``make install`` runs this).

The headers and library come from the ``onednn-devel-cpu-gomp`` / ``onednn-cpu-gomp`` wheels, which
install them under the environment's prefix (``include/``, ``lib/``); the XLA FFI headers from
jaxlib. Where the wheels are missing (they exist for x86-64 Linux only) nothing is built and the
core keeps XLA's convolutions.

Usage: ``python -m core.native.build [--cxx g++]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import jax.ffi

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "onednn_conv.cc"
TARGET = HERE / "libonednn_conv.so"


def command(cxx: str, prefix: Path, out: Path) -> list[str]:
    """The compiler command line that builds ``out`` against the oneDNN under ``prefix``."""
    lib = prefix / "lib"
    return [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-w", f"-I{jax.ffi.include_dir()}",
            f"-I{prefix / 'include'}", str(SOURCE), "-o", str(out), f"-L{lib}", "-ldnnl",
            f"-Wl,-rpath,{lib}"]


def main(argv: list[str] | None = None) -> int:
    """Build the library (to a temporary name, then moved into place); 0 when built or skipped."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--cxx", default="g++", help="the C++ compiler (make passes its CXX)")
    args = p.parse_args(argv)
    prefix = Path(sys.prefix)
    if not (prefix / "include" / "dnnl.hpp").exists():
        print(f"oneDNN headers not under {prefix / 'include'}: the core keeps XLA's convolutions")
        return 0
    tmp = TARGET.with_suffix(".so.tmp")
    subprocess.run(command(args.cxx, prefix, tmp), check=True)
    os.replace(tmp, TARGET)
    print(f"built {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
