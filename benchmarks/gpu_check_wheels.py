"""The GPU check's carried wheels: packed small enough to travel, installed on the device for what its image lacks.

    python benchmarks/gpu_check_wheels.py pack wheels               (--prepare, here: after pip download)
    python benchmarks/gpu_check_wheels.py install wheels SITE       (gpu_check.sh, on the device machine)

The device tool carries at most 64 MiB, the working tree included, and llvmlite's wheel alone is 57 MiB (its
libllvmlite.so is 170 MiB). `pack` rewrites every wheel over PACK_OVER_BYTES as `<wheel>.xz`: the same files in an
uncompressed zip, then xz (lzma preset 9), which takes llvmlite to about 38 MiB (2-4 minutes of one core here).
`install` imports each module the check needs (MODULES) with the device's python; for those that fail, it unpacks
their wheels (an `.xz` back to the `.whl`, about 3 s for llvmlite) into a temporary folder and pip-installs them into
SITE with no index and no dependencies. A module that the image already has is used as it is: nothing is installed
into the image, and a carried wheel never shadows a working copy there.
"""

from __future__ import annotations

import io
import lzma
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACK_OVER_BYTES = 3_000_000
# The module the check imports -> the distributions that provide it (wheel file names start with these).
MODULES = {
    "msgspec": ("msgspec",),
    "isal": ("isal",),
    "plotly": ("plotly",),  # HolisticTraceAnalysis imports it
    "hta": ("holistictraceanalysis",),
    "numba": ("numba", "llvmlite"),  # tracekit's replay and op tree are compiled with numba
}


def pack(folder: Path) -> list[Path]:
    """Replace each wheel in `folder` over PACK_OVER_BYTES by `<wheel>.xz`; the packed files, biggest first."""
    done = []
    for whl in sorted(folder.glob("*.whl")):
        if whl.stat().st_size <= PACK_OVER_BYTES:
            continue
        print(f"gpu_check: packing {whl.name} ({whl.stat().st_size / 2**20:.1f} MiB) with xz ...", flush=True)
        stored = io.BytesIO()
        with zipfile.ZipFile(whl) as src, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as dst:
            for info in src.infolist():  # the same entries (names, times, modes), not compressed
                dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_STORED)
        target = whl.with_name(whl.name + ".xz")
        target.write_bytes(lzma.compress(stored.getvalue(), preset=9))
        whl.unlink()
        done.append(target)
    return sorted(done, key=lambda p: -p.stat().st_size)


def unpack(packed: Path, into: Path) -> Path:
    """The wheel `packed` (a `.whl`, or a `.whl.xz` from `pack`) as a `.whl` file in `into`."""
    if packed.suffix != ".xz":
        return packed
    whl = into / packed.name.removesuffix(".xz")
    with lzma.open(packed) as src, open(whl, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
    return whl


def _dist(path: Path) -> str:
    return path.name.split("-")[0].lower().replace("_", "-")


def missing(python: str = sys.executable) -> list[str]:
    """The MODULES that `python` cannot import (each tried in a process of its own)."""
    return [m for m in MODULES if subprocess.run([python, "-c", f"import {m}"], capture_output=True).returncode]


def install(folder: Path, site: Path, python: str = sys.executable) -> int:
    """pip-install into `site` the carried wheels of the modules `python` lacks; 1 when one is missing from `folder`."""
    lacking = missing(python)
    if not lacking:
        print("gpu_check: the image has " + ", ".join(MODULES) + ": no wheel installed", flush=True)
        return 0
    wanted = {d for m in lacking for d in MODULES[m]}
    carried = {_dist(p): p for p in sorted(folder.glob("*.whl*"))}
    absent = sorted(wanted - set(carried))
    if absent:
        print(f"gpu_check: the image lacks {', '.join(lacking)} and {folder}/ has no wheel for {', '.join(absent)}: "
              "run benchmarks/gpu_check.sh --prepare where pip reaches PyPI", file=sys.stderr, flush=True)
    present = sorted(wanted & set(carried))
    if not present:
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        wheels = [str(unpack(carried[d], Path(tmp))) for d in present]
        done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--no-cache-dir", "--upgrade", "--target", str(site), *wheels])
    print(f"gpu_check: the image lacks {', '.join(lacking)}; installed {', '.join(Path(w).name for w in wheels)} "
          f"into {site}" + ("" if done.returncode == 0 else f" FAILED (pip exit {done.returncode})"), flush=True)
    return 1 if absent or done.returncode else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "pack":
        for p in pack(Path(argv[1])):
            print(f"gpu_check: {p.name}: {p.stat().st_size / 2**20:.1f} MiB", flush=True)
        return 0
    if len(argv) == 3 and argv[0] == "install":
        return install(Path(argv[1]), Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
