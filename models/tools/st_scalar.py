#!/usr/bin/env python3
"""Read or set one-element tensors (T2MLR's gamma_rec and gamma_cur, LRT's
gammas) of a model directory's model.safetensors, in place.

usage: st_scalar.py DIR NAME...              prints NAME=VALUE, one a line
       st_scalar.py DIR NAME=VALUE...        sets them (F32 tensors)

The experiments use it to start a retrofit T2MLR with its recurrent path
open (models/experiment.sh, STATE_VAR_FORK_GAMMA_REC) and to log the gammas
in a learning curve. Only tensors of one element; anything else is refused,
naming the file and the tensor. It patches the four bytes in place rather
than going through tests/ref/safetensors_py.py, which needs numpy (a test
dependency, not the experiments') and rewrites every tensor in one dtype.
"""
import json
import os
import struct
import sys



def fail(msg):
    sys.exit("st_scalar: " + msg)


def load(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if len(raw) < 8:
        fail(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        fail(f"{path}: header length {n} runs past the file's {len(raw)} bytes")
    return raw, json.loads(raw[8:8 + n]), 8 + n


def locate(path, header, base, name):
    t = header.get(name)
    if t is None:
        fail(f"{path}: no tensor {name}")
    if t["dtype"] != "F32":
        fail(f"{path}: {name} is {t['dtype']}, not F32")
    b, e = t["data_offsets"]
    if e - b != 4:
        fail(f"{path}: {name} has shape {t['shape']}, not one element")
    return base + b


def main(argv):
    if len(argv) < 2:
        fail("usage: st_scalar.py DIR NAME[=VALUE]...")
    path = argv[0].rstrip("/") + "/model.safetensors"
    raw, header, base = load(path)
    sets = [a for a in argv[1:] if "=" in a]
    if sets and len(sets) != len(argv) - 1:
        fail("either read names or set NAME=VALUE, not both")
    if not sets:
        for name in argv[1:]:
            off = locate(path, header, base, name)
            print(f"{name}={struct.unpack_from('<f', raw, off)[0]:.6g}")
        return
    buf = bytearray(raw)
    for a in sets:
        name, value = a.split("=", 1)
        off = locate(path, header, base, name)
        buf[off:off + 4] = struct.pack("<f", float(value))
    tmp = path + ".tmp"  # written whole, then renamed: a stopped run never leaves half a file
    with open(tmp, "wb") as f:
        f.write(buf)
    os.replace(tmp, path)


if __name__ == "__main__":
    main(sys.argv[1:])
