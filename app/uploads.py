"""Uploaded trace files or a zip of a run, checked and written into a private temporary folder.

Guards: a limit on the upload's size; for zips, a limit on the number of entries, no symlinks, no encrypted
entries, and a compression ratio and total extracted size that are checked while the bytes stream out, not
trusted from the zip's header; a ``.gz`` trace is test-decompressed within the same budget, because the
reader would otherwise inflate it in memory. File names are reduced to their last part, so nothing is written
outside the folder.
"""

from __future__ import annotations

import io
import shutil
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from app.paths import is_trace_name

CHUNK = 1 << 20
KEEP_TOO = ("run.json",)  # a workload's facts travel with its traces


class UploadRefused(ValueError):
    """An upload that breaks a limit or holds no trace; nothing of it is kept."""


@dataclass(frozen=True, kw_only=True)
class UploadLimits:
    """What one upload may be. Sizes in bytes; ``max_ratio`` is uncompressed / compressed per entry."""

    max_upload_bytes: int = 200 * 2**20
    max_extracted_bytes: int = 2 * 2**30
    max_files: int = 256
    max_ratio: float = 200.0

    def __post_init__(self) -> None:
        if min(self.max_upload_bytes, self.max_extracted_bytes, self.max_files) <= 0 or self.max_ratio <= 1:
            raise ValueError("upload limits must be positive (and max_ratio above 1)")


def save_upload(files: list[tuple[str, bytes]], parent: Path, name: str, limits: UploadLimits = UploadLimits()) -> Path:
    """Write uploaded ``(file name, bytes)`` pairs as one run folder ``parent/name``; return it.

    A ``.zip`` is extracted (flat: folders inside it are dropped); trace files (``.json``, ``.json.gz``) and
    ``run.json`` are kept, everything else in a zip is ignored. Raises ``UploadRefused`` and leaves nothing
    behind when a limit is broken or no trace remains.
    """
    total = sum(len(data) for _, data in files)
    if total > limits.max_upload_bytes:
        raise UploadRefused(f"upload of {total / 2**20:.1f} MiB is over the {limits.max_upload_bytes / 2**20:.0f} MiB limit")
    folder = Path(tempfile.mkdtemp(prefix=f"{_safe_name(name)}-", dir=parent))
    try:
        budget = _Budget(limits.max_extracted_bytes)
        for file_name, data in files:
            base = _base_name(file_name)
            if base.lower().endswith(".zip"):
                _extract_zip(data, folder, limits, budget, base)
            elif is_trace_name(base) or base in KEEP_TOO:
                _write(folder, base, [data], budget, base)
            else:
                raise UploadRefused(f"{base}: not a trace (.json, .json.gz) or a .zip")
        if not any(is_trace_name(p.name) for p in folder.iterdir()):
            raise UploadRefused("the upload holds no trace file (.json, .json.gz)")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


class _Budget:
    """Bytes that may still be written (or inflated) for this upload."""

    def __init__(self, limit: int) -> None:
        self.limit, self.left = limit, limit

    def spend(self, n: int, what: str) -> None:
        self.left -= n
        if self.left < 0:
            raise UploadRefused(f"{what}: expands past the {self.limit / 2**20:.0f} MiB limit (a decompression bomb?)")


def _extract_zip(data: bytes, folder: Path, limits: UploadLimits, budget: _Budget, zip_name: str) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = [i for i in archive.infolist() if not i.is_dir()]
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise UploadRefused(f"{zip_name}: not a readable zip ({err})") from None
    if len(entries) > limits.max_files:
        raise UploadRefused(f"{zip_name}: {len(entries)} entries, over the limit of {limits.max_files}")
    for info in entries:
        where = f"{zip_name}:{info.filename}"
        if stat.S_ISLNK(info.external_attr >> 16):
            raise UploadRefused(f"{where}: symlinks are refused")
        if info.flag_bits & 0x1:
            raise UploadRefused(f"{where}: encrypted entries are refused")
        try:
            base = _base_name(info.filename)
        except UploadRefused:
            continue  # a dotfile such as __MACOSX/._x: not ours to read
        if not (is_trace_name(base) or base in KEEP_TOO):
            continue  # a README: not ours to read
        if info.file_size > CHUNK and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise UploadRefused(f"{where}: compression ratio over {limits.max_ratio:.0f} (a decompression bomb?)")
        try:
            with archive.open(info) as stream:
                _write(folder, base, _chunks(stream, info, limits, where), budget, where)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise UploadRefused(f"{where}: corrupt entry ({err})") from None


def _chunks(stream, info: zipfile.ZipInfo, limits: UploadLimits, where: str):
    """The entry's bytes, refused as soon as they outgrow the ratio (headers can lie)."""
    allowed = max(limits.max_ratio * max(info.compress_size, 1), CHUNK)
    seen = 0
    while chunk := stream.read(CHUNK):
        seen += len(chunk)
        if seen > allowed:
            raise UploadRefused(f"{where}: compression ratio over {limits.max_ratio:.0f} (a decompression bomb?)")
        yield chunk


def _write(folder: Path, base: str, chunks, budget: _Budget, where: str) -> None:
    target = folder / base
    if target.exists():
        raise UploadRefused(f"{where}: two files named {base}")
    with open(target, "xb") as out:
        for chunk in chunks:
            budget.spend(len(chunk), where)
            out.write(chunk)
    if base.endswith(".gz"):
        _check_gzip(target, budget, where)


def _check_gzip(path: Path, budget: _Budget, where: str) -> None:
    """Inflate a .gz to nowhere, within the budget, so the reader never inflates a bomb into memory."""
    inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    with open(path, "rb") as src:
        while chunk := src.read(CHUNK):
            while chunk:
                try:
                    out = inflater.decompress(chunk, CHUNK)
                except zlib.error:
                    return  # not valid gzip: the reader names the file and the problem
                budget.spend(len(out), where)
                chunk = inflater.unconsumed_tail
            if inflater.eof:
                return


def _base_name(name: str) -> str:
    """The last part of an uploaded name, whichever separator it used; refused when nothing usable is left."""
    base = PureWindowsPath(PurePosixPath(name).name).name
    if base in ("", ".", "..") or "\x00" in base or base.startswith("."):
        raise UploadRefused(f"{name!r}: not a usable file name")
    return base


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:60].strip(".-")
    return cleaned or "upload"
