#!/usr/bin/env python3
"""Adds an exported MTP layer to the shipped tiny-glm5-chat checkpoints.

train_mtp.py exports whole checkpoints, but its FP8 export re-quantizes the
main weights with torch's e4m3 rounding, which differs from the shipped
FP8 checkpoint's in ~2 % of the bytes; the goldens and parity figures are
for the shipped weights. So this script takes only the layer
(model.layers.{num_hidden_layers}.*) from the export and writes it next to
the shipped main weights, byte for byte unchanged, with
num_nextn_predict_layers 1 (and, for FP8, the layer's bf16 modules in
modules_to_not_convert).

--bf16-from-fp8: the bf16 checkpoint's layer is the FP8 export's layer
dequantized (e4m3 x block scale, rounded to bf16). Used when only the FP8
export came back from the device (the bf16 tar was over its file limit);
PROVENANCE.md says which was done.

numpy only (the CPU box's torch has no float8 dtype):
  python3 tools/train_tiny/splice_mtp.py --export DIR [--bf16-export DIR] [--bf16-from-fp8] \
      --model models/tiny-glm5-chat
"""
import argparse
import json
import os

import numpy as np

from safetensors_raw import read, write

NOT_CONVERTED = ["eh_proj", "enorm", "hnorm", "shared_head"]


def e4m3_table():
    """The 256 e4m3fn values (no infinities; 0x7f / 0xff are NaN)."""
    out = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        out[b] = -v if s else v
    return out


def to_bf16_bytes(x):
    """fp32 -> bf16 with round-to-nearest-even, as raw little-endian bytes."""
    u = x.astype(np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


def dequantized_bf16(layer):
    """The FP8 layer's tensors with every e4m3 weight dequantized to bf16."""
    table = e4m3_table()
    out = {}
    for name, (dtype, shape, data) in layer.items():
        if name.endswith("_scale_inv"):
            continue
        if dtype != "F8_E4M3":
            out[name] = (dtype, shape, data)
            continue
        q = table[np.frombuffer(data, dtype=np.uint8)].reshape(shape)
        s_dtype, s_shape, s_data = layer[name + "_scale_inv"]
        scale = np.frombuffer(s_data, dtype=np.float32).reshape(s_shape)
        full = np.repeat(np.repeat(scale, 128, axis=0)[:shape[0]], 128, axis=1)[:, :shape[1]]
        out[name] = ("BF16", shape, to_bf16_bytes(q * full))
    return out


def splice(variant_dir, layer, prefix):
    path = os.path.join(variant_dir, "model.safetensors")
    main = read(path)
    if any(k.startswith(prefix) for k in main):
        raise SystemExit(f"{path} already has {prefix}*")
    main.update(layer)
    write(path, main)
    config_path = os.path.join(variant_dir, "config.json")
    config = json.load(open(config_path))
    config["num_nextn_predict_layers"] = 1
    q = config.get("quantization_config")
    if q is not None:
        keep = q.setdefault("modules_to_not_convert", [])
        keep += [m for m in NOT_CONVERTED if m not in keep]
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"{path}: {len(layer)} tensors of {prefix}* added, {len(main) - len(layer)} main tensors unchanged")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True, help="train_mtp.py's output (its fp8/ is read)")
    ap.add_argument("--bf16-export", help="the export's bf16/ directory, when it came back")
    ap.add_argument("--bf16-from-fp8", action="store_true")
    ap.add_argument("--model", default="models/tiny-glm5-chat")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "fp8", "config.json")))
    prefix = f"model.layers.{config['num_hidden_layers']}."
    fp8 = {k: v for k, v in read(os.path.join(args.export, "fp8", "model.safetensors")).items() if k.startswith(prefix)}
    if args.bf16_export:
        bf16 = {k: v for k, v in read(os.path.join(args.bf16_export, "model.safetensors")).items()
                if k.startswith(prefix)}
    elif args.bf16_from_fp8:
        bf16 = dequantized_bf16(fp8)
    else:
        raise SystemExit("give --bf16-export DIR or --bf16-from-fp8")
    splice(os.path.join(args.model, "fp8"), fp8, prefix)
    splice(os.path.join(args.model, "bf16"), bf16, prefix)


if __name__ == "__main__":
    main()
