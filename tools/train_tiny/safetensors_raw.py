"""Safetensors files as raw bytes: name -> (dtype, shape, bytes).

One reader and one writer for the tiny-model tools (export.py, which maps
torch tensors to bytes; splice_mtp.py, which never builds tensors because
the CPU box's torch has no float8 dtype). The writer's layout is fixed:
tensors sorted by name, "__metadata__" {"format": "pt"} last, compact JSON
padded with spaces to 8 bytes, so the same tensors give the same file.
"""
import json
import struct


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    body = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)
