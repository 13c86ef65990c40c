"""A small, independent safetensors reader/writer for the test reference.

Format: 8-byte little-endian header length N, N bytes of JSON header
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}),
then the raw little-endian tensor data; offsets are relative to the data start.
Written on purpose without sharing anything with the C engine's loader.
"""
import json
import os
import struct

import numpy as np

_ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2}


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = ((u >> 16) & 1) + 0x7FFF
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def encode_tensor(a, dtype):
    """Returns the raw bytes of float array `a` stored as dtype."""
    a = np.asarray(a)
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype="<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
    raise ValueError("unknown dtype " + dtype)


def stored_values(a, dtype):
    """The float64 values a reader gets back after storing `a` as dtype."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.astype(np.float64)
    if dtype == "F16":
        return a.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(a.shape).astype(np.float64)
    raise ValueError("unknown dtype " + dtype)


def write_file(path, tensors, dtype, metadata=None):
    """tensors: list of (name, float array). Writes one .safetensors file."""
    header = {}
    blobs = []
    off = 0
    for name, a in tensors:
        raw = encode_tensor(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(np.shape(a)),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = metadata or {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)  # pad to 8 bytes like the HF writer
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return off


def read_file(path):
    """Returns {name: float64 ndarray} for one .safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(path + ": too short")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(path + ": header length points past end of file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _ITEMSIZE:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if e - b != count * _ITEMSIZE[dt] or base + e > len(data):
            raise ValueError("%s: tensor %s has bad data_offsets" % (path, name))
        raw = data[base + b:base + e]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        else:
            a = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
        out[name] = a.astype(np.float64).reshape(shape)
    return out


def read_model_dir(d):
    """Reads model.safetensors, or every shard named by model.safetensors.index.json."""
    single = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_file(single)
    with open(index) as f:
        wm = json.load(f)["weight_map"]
    out = {}
    for shard in sorted(set(wm.values())):
        t = read_file(os.path.join(d, shard))
        for name, a in t.items():
            if wm.get(name) != shard:
                raise ValueError("%s: tensor %s not mapped to this shard" % (shard, name))
            out[name] = a
    missing = [n for n in wm if n not in out]
    if missing:
        raise ValueError("index names tensors not found in shards: %s" % missing[:5])
    return out
