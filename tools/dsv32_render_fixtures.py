#!/usr/bin/env python3
"""Renders the DeepSeek-V3.2 fixture conversations with the model's own encoder.

DeepSeek-V3.2 ships its prompt format as Python (encoding/encoding_dsv32.py in
the model repository) rather than a Jinja template; spar implements the same
rules in C++ (text/dsv32_encoding.h). This script renders every conversation
of tests/text/data/dsv32/cases.json with the official encode_messages, the way
serving frameworks call it (the request's tools in the first system message,
thinking_mode "thinking" or "chat"), and writes the prompts to renders.json,
which tests/text/dsv32_encoding_test.cc then compares with spar's byte for byte.

Run it where the model's files are (the GPU host; needs only Python 3):

  python3 tools/dsv32_render_fixtures.py --model-dir /models/DeepSeek-V3.2
  python3 tools/dsv32_render_fixtures.py --encoding path/to/encoding_dsv32.py

and commit tests/text/data/dsv32/renders.json. Nothing is downloaded: without
the encoder file the script says where it looked and exits 2.
"""

import argparse
import copy
import hashlib
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "text", "data", "dsv32")


def load_encoder(path):
    spec = importlib.util.spec_from_file_location("encoding_dsv32", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_tools(messages, tools):
    """The request's tools on the first system message (one is added)."""
    out = copy.deepcopy(messages)
    if tools:
        if not out or out[0].get("role") != "system":
            out.insert(0, {"role": "system", "content": ""})
        out[0]["tools"] = copy.deepcopy(tools)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoding", help="path of encoding_dsv32.py")
    parser.add_argument("--model-dir", help="model directory holding encoding/encoding_dsv32.py")
    parser.add_argument("--cases", default=os.path.join(DATA, "cases.json"))
    parser.add_argument("--out", default=os.path.join(DATA, "renders.json"))
    args = parser.parse_args()
    candidates = []
    if args.encoding:
        candidates.append(args.encoding)
    if args.model_dir:
        candidates += [os.path.join(args.model_dir, "encoding", "encoding_dsv32.py"),
                       os.path.join(args.model_dir, "encoding_dsv32.py")]
    path = next((p for p in candidates if os.path.isfile(p)), None)
    if path is None:
        print("encoding_dsv32.py not found (looked at: %s); pass --encoding or --model-dir" %
              (", ".join(candidates) or "nothing: no --encoding / --model-dir given"), file=sys.stderr)
        return 2
    encoder = load_encoder(path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    renders = []
    for case in cases:
        messages = with_tools(case["messages"], case.get("tools"))
        mode = "thinking" if case["thinking"] else "chat"
        try:
            prompt = encoder.encode_messages(messages, thinking_mode=mode)
            renders.append({"name": case["name"], "prompt": prompt})
        except Exception as e:  # the official encoder refuses some inputs: so must spar
            renders.append({"name": case["name"], "error": "%s: %s" % (type(e).__name__, e)})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"encoding_sha256": digest, "encoding_path": os.path.basename(path), "renders": renders}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %d renders to %s (encoder sha256 %s)" % (len(renders), args.out, digest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
