"""Lossless weight deltas: what one trainer step changed, as a compact, bit-exact blob.

``encode_delta(base, new, base_version, new_version)`` turns two state dicts into bytes and
``apply_delta(base, blob, held_version)`` turns ``base`` plus those bytes back into ``new``,
bit for bit. Per tensor: XOR the raw bytes of new and base (viewed as an integer dtype of the
same width), split the result into byte planes (all first bytes of each element, then all
second bytes, ...), and compress each plane. A small optimizer step leaves sign, exponent and
the top of the mantissa unchanged, so the high planes are almost all zeros; the plane split
puts those zeros next to each other, which makes deflate faster and its output smaller than
compressing the interleaved XOR. The compressor is zstandard when it is importable, else
zlib (level 1, run-length strategy: faster and smaller than the default strategy on these
planes); the header records which.

Layout: ``MAGIC``, an 8-byte little-endian header length, the JSON header, then each tensor's
compressed planes in header order. The header holds the format version, the codec, both
policy versions, and per tensor its name, dtype, shape, mode, the CRC-32 of its new bytes and
the compressed plane sizes. Modes:

- ``xor``: against the base tensor of the same name, whose CRC-32 the header also holds; the
  receiver checks it before applying, so a base that differs in content (not only in version)
  is a ``DeltaMismatch`` rather than silently wrong weights;
- ``whole``: the tensor itself (shuffled and compressed, not XORed), for names that are not in
  ``base`` or whose shape or dtype changed;
- ``same``: bytes equal to an earlier tensor of the blob (tied embeddings, where
  ``lm_head.weight`` is ``model.embed_tokens.weight``, or norm weights still all ones), sent
  once; found by CRC-32 and confirmed by comparing bytes, so it needs no shared storage.

The result holds exactly the names of ``new``; names only in ``base`` are dropped. The CRC-32
of every result tensor is checked after applying. A blob is sized before anything is
allocated or decompressed: ``read_header`` refuses unknown dtypes, names given twice and any
tensor over ``MAX_TENSOR_BYTES``; ``apply_delta`` refuses a blob whose tensors together would
hold more than ``max_bytes`` (default: twice the base's bytes + 64 MiB), so a header that
declares a shape like ``[2**62, 2**62]`` is a ``MalformedDelta``, never an allocation. Bytes
are in host byte order (both ends little-endian; another order fails the checks rather than
loading). Tensors are encoded and decoded on a thread pool; torch, zlib and zstandard release
the GIL.

Left out: lossy tricks (sparsification, quantized deltas, top-k); delta chains (a blob is
always against one base version, the one the receiver holds); streaming (the blob is built and
read whole, about the size of the changed bytes); splitting one large tensor across threads
(the embedding is the longest single job).
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

MAGIC = b"CHTDELTA"
FORMAT = 1
MAX_TENSOR_BYTES = 1 << 40  # 1 TiB: past any one tensor of a model this code serves
SLACK_BYTES = 64 << 20  # what apply_delta allows on top of twice the base's bytes
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class DeltaMismatch(ValueError):
    """The blob was made against a base the receiver does not hold (version or tensors)."""


class MalformedDelta(ValueError):
    """The bytes are not a delta this code can read (magic, format, codec, truncation)."""


def encode_delta(
    base: dict[str, torch.Tensor],
    new: dict[str, torch.Tensor],
    base_version: int,
    new_version: int,
    *,
    workers: int | None = None,
) -> bytes:
    """The delta that turns ``base`` (at ``base_version``) into ``new`` (at ``new_version``).

    Tensors of ``new`` that ``base`` lacks, or whose shape or dtype changed, are sent whole.
    ``workers`` threads encode (default: one per CPU, at most 8).
    """
    codec = _codec()
    names = list(new)
    with _pool(workers) as pool:
        crcs = list(pool.map(lambda name: zlib.crc32(_bytes(new[name]).numpy()), names))
        entries: list[dict[str, Any]] = []
        todo: list[dict[str, Any]] = []
        seen: dict[tuple[str, tuple[int, ...], int], str] = {}  # (dtype, shape, crc) -> name
        for name, crc in zip(names, crcs, strict=True):
            tensor = new[name]
            entry: dict[str, Any] = {
                "name": name,
                "dtype": _dtype_name(tensor.dtype),
                "shape": list(tensor.shape),
                "crc": crc,
            }
            twin = seen.setdefault((entry["dtype"], tuple(tensor.shape), crc), name)
            if twin != name and torch.equal(_bytes(new[twin]), _bytes(tensor)):
                entry.update(mode="same", of=twin)
            else:
                todo.append(entry)
            entries.append(entry)
        planes = list(
            pool.map(lambda e: _encode_tensor(e, new[e["name"]], base.get(e["name"]), codec), todo)
        )
    header = json.dumps(
        {
            "format": FORMAT,
            "codec": codec,
            "base_version": int(base_version),
            "new_version": int(new_version),
            "tensors": entries,
        }
    ).encode()
    payload = [plane for tensor_planes in planes for plane in tensor_planes]
    return b"".join([MAGIC, struct.pack("<Q", len(header)), header, *payload])


def _encode_tensor(
    entry: dict[str, Any], tensor: torch.Tensor, old: torch.Tensor | None, codec: str
) -> list[bytes]:
    """The tensor's compressed planes; sets the entry's mode, base_crc and plane sizes."""
    data = _bytes(tensor)
    width = tensor.element_size()
    if old is not None and old.dtype == tensor.dtype and old.shape == tensor.shape:
        old_data = _bytes(old)
        entry.update(mode="xor", base_crc=zlib.crc32(old_data.numpy()))
        data = _xor(old_data, data, width)
    else:
        entry["mode"] = "whole"
    planes = [_compress(codec, plane) for plane in _planes(data, width)]
    entry["planes"] = [len(p) for p in planes]
    return planes


def read_header(blob: bytes | memoryview) -> tuple[dict[str, Any], int]:
    """The blob's header (checked for shape, not against any base) and where its payload
    starts."""
    view = memoryview(blob)
    start = len(MAGIC) + 8
    if len(view) < start or bytes(view[: len(MAGIC)]) != MAGIC:
        raise MalformedDelta("not a cheetah weight delta (bad magic)")
    (size,) = struct.unpack_from("<Q", view, len(MAGIC))
    try:
        header = json.loads(bytes(view[start : start + size]))
    except (ValueError, RecursionError):
        raise MalformedDelta("the delta's header is not valid JSON") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else None
        raise MalformedDelta(f"delta format {found!r}; this reader reads format {FORMAT}")
    if not all(isinstance(header.get(k), int) for k in ("base_version", "new_version")):
        raise MalformedDelta("the delta's header lacks integer base_version/new_version")
    tensors = header.get("tensors")
    if not isinstance(tensors, list) or not all(_entry_ok(e) for e in tensors):
        raise MalformedDelta("the delta's header has a malformed tensor list")
    names = [e["name"] for e in tensors]
    if len(set(names)) != len(names):
        raise MalformedDelta("the delta's header names a tensor twice")
    for entry in tensors:
        size_of(entry)
    return header, start + size


def size_of(entry: dict[str, Any]) -> int:
    """The bytes a header entry's tensor holds; ``MalformedDelta`` for an unknown dtype or a
    tensor over ``MAX_TENSOR_BYTES`` (computed on Python ints: no overflow, no allocation)."""
    nbytes = math.prod(entry["shape"]) * _dtype(entry["dtype"]).itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise MalformedDelta(
            f"tensor {entry['name']}: shape {entry['shape']} of {entry['dtype']} would hold "
            f"{nbytes} bytes, over the {MAX_TENSOR_BYTES} a delta tensor may hold"
        )
    return nbytes


def _entry_ok(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    mode = entry.get("mode")
    shape = entry.get("shape")
    common = (
        isinstance(entry.get("name"), str)
        and isinstance(entry.get("dtype"), str)
        and isinstance(shape, list)
        and len(shape) <= 64  # torch's most dimensions
        and all(isinstance(n, int) and n >= 0 for n in shape)
        and isinstance(entry.get("crc"), int)
    )
    if mode == "same":
        return common and isinstance(entry.get("of"), str)
    planes = entry.get("planes")
    sized = isinstance(planes, list) and all(isinstance(n, int) and n >= 0 for n in planes)
    if mode == "xor":
        return common and sized and isinstance(entry.get("base_crc"), int)
    return common and sized and mode == "whole"


def apply_delta(
    base: dict[str, torch.Tensor],
    blob: bytes | memoryview,
    held_version: int,
    *,
    workers: int | None = None,
    max_bytes: int | None = None,
) -> tuple[dict[str, torch.Tensor], int]:
    """``base`` (at ``held_version``) plus ``blob``: the new state dict (CPU tensors) and its
    version. Raises ``DeltaMismatch`` before decoding anything if the blob was made against
    another version or other tensors, ``MalformedDelta`` if it cannot be read or its tensors
    would hold more than ``max_bytes`` together (default: twice ``base``'s bytes + 64 MiB)."""
    header, offset = read_header(blob)
    if header["base_version"] != held_version:
        raise DeltaMismatch(
            f"the delta is against policy version {header['base_version']}, "
            f"the receiver holds version {held_version}"
        )
    entries = header["tensors"]
    limit = max_bytes if max_bytes is not None else 2 * state_bytes(base) + SLACK_BYTES
    total = sum(size_of(e) for e in entries if e["mode"] != "same")
    if total > limit:
        raise MalformedDelta(
            f"the delta's tensors would hold {total} bytes, over this receiver's limit of "
            f"{limit} bytes"
        )
    view = memoryview(blob)
    spans = []  # (entry, where its planes start), checked against the blob's length up front
    for entry in entries:
        if entry["mode"] != "same":
            spans.append((entry, offset))
            offset += sum(entry["planes"])
    if offset > len(view):
        raise MalformedDelta(f"the delta is truncated: {len(view)} bytes, its header says {offset}")
    codec = header["codec"]
    with _pool(workers) as pool:
        xored = [e for e in entries if e["mode"] == "xor"]
        list(pool.map(lambda e: _check_base(base.get(e["name"]), e), xored))
        decoded = iter(list(pool.map(lambda span: _decode_tensor(*span, view, base, codec), spans)))
    out: dict[str, torch.Tensor] = {}
    for entry in entries:
        if entry["mode"] != "same":
            out[entry["name"]] = next(decoded)
            continue
        twin = out.get(entry["of"])
        if twin is None or (_dtype_name(twin.dtype), list(twin.shape)) != (
            entry["dtype"],
            entry["shape"],
        ):
            raise MalformedDelta(f"tensor {entry['name']} repeats {entry['of']!r}, not before it")
        out[entry["name"]] = twin
    return out, int(header["new_version"])


def state_bytes(state: dict[str, torch.Tensor]) -> int:
    """The bytes of a state dict's tensors (tied ones counted once per name)."""
    return sum(t.numel() * t.element_size() for t in state.values())


def _check_base(old: torch.Tensor | None, entry: dict[str, Any]) -> None:
    """The base tensor of an ``xor`` entry exists with its dtype, shape and content (CRC-32)."""
    name, shape = entry["name"], list(entry["shape"])
    if old is None:
        raise DeltaMismatch(f"the delta XORs tensor {name}, which the receiver lacks")
    if _dtype_name(old.dtype) != entry["dtype"] or list(old.shape) != shape:
        raise DeltaMismatch(
            f"tensor {name}: the delta's base is {entry['dtype']} {shape}, "
            f"the receiver holds {_dtype_name(old.dtype)} {list(old.shape)}"
        )
    if zlib.crc32(_bytes(old).numpy()) != entry["base_crc"]:
        raise DeltaMismatch(
            f"tensor {name}: the receiver's weights differ from the delta's base "
            "(same version, other content)"
        )


def _decode_tensor(
    entry: dict[str, Any],
    offset: int,
    view: memoryview,
    base: dict[str, torch.Tensor],
    codec: str,
) -> torch.Tensor:
    name, dtype, shape = entry["name"], _dtype(entry["dtype"]), tuple(entry["shape"])
    width = dtype.itemsize
    if len(entry["planes"]) != width:
        raise MalformedDelta(f"tensor {name} has {len(entry['planes'])} byte planes, not {width}")
    numel = math.prod(shape)
    planes = []
    for size in entry["planes"]:
        planes.append(_decompress(codec, view[offset : offset + size], numel))
        offset += size
    data = _unplanes(planes, width)
    if entry["mode"] == "xor":
        data = _xor(_bytes(base[name]), data, width)
    if zlib.crc32(data.numpy()) != entry["crc"]:
        raise MalformedDelta(f"tensor {name} decodes to bytes whose CRC-32 differs")
    return data.view(dtype).reshape(shape)


def _pool(workers: int | None) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1))


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bytes as a flat CPU uint8 tensor (no copy when already so laid out)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous().reshape(-1).view(torch.uint8)


def _xor(a: torch.Tensor, b: torch.Tensor, width: int) -> torch.Tensor:
    """Bytewise XOR of two flat uint8 tensors, computed on integers of the element width."""
    as_int = _INT_OF_WIDTH.get(width, torch.uint8)
    return torch.bitwise_xor(a.view(as_int), b.view(as_int)).view(torch.uint8)


def _planes(data: torch.Tensor, width: int) -> list[memoryview]:
    """Byte ``i`` of every element, for each ``i`` (one plane for 1-byte dtypes)."""
    if width == 1:
        return [memoryview(data.numpy())]
    shuffled = data.view(-1, width).t().contiguous()
    return [memoryview(row.numpy()) for row in shuffled]


def _unplanes(planes: list[bytes], width: int) -> torch.Tensor:
    if not planes or not planes[0]:  # an empty tensor (frombuffer refuses empty buffers)
        return torch.empty(0, dtype=torch.uint8)
    rows = [torch.frombuffer(bytearray(p), dtype=torch.uint8) for p in planes]
    if width == 1:
        return rows[0]
    return torch.stack(rows, dim=1).reshape(-1)


def _codec() -> str:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return "zlib"
    return "zstd"


def _compress(codec: str, data: memoryview) -> bytes:
    if codec == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=1).compress(data)
    packer = zlib.compressobj(1, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
    return packer.compress(data) + packer.flush()


def _decompress(codec: str, data: memoryview, size: int) -> bytes:
    """One plane, refusing to produce more than its ``size`` bytes (no decompression bombs)."""
    if codec == "zlib":
        unpacker = zlib.decompressobj()
        try:
            out = unpacker.decompress(data, size + 1)
        except zlib.error as e:
            raise MalformedDelta(f"a delta plane does not decompress: {e}") from None
    elif codec == "zstd":
        try:
            import zstandard
        except ImportError:
            raise MalformedDelta(
                "the delta is zstd-compressed; zstandard is not installed"
            ) from None
        try:  # max_output_size is allocated up front: ``size`` was bounded before this
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size + 1)
        except zstandard.ZstdError as e:
            raise MalformedDelta(f"a delta plane does not decompress: {e}") from None
    else:
        raise MalformedDelta(f"unknown delta codec {codec!r}")
    if len(out) != size:
        raise MalformedDelta(f"a delta plane holds {len(out)}+ bytes, expected {size}")
    return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise MalformedDelta(f"unknown dtype {name!r} in the delta")
    return dtype
