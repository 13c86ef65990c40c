#!/usr/bin/env python3
"""Copies a model directory with its weights converted to BF16.

  to_bf16.py SRC_DIR DST_DIR

Writes DST_DIR/model.safetensors (every tensor BF16, round to nearest even)
and copies config.json (torch_dtype set to bfloat16), tokenizer.json,
tokenizer_config.json, special_tokens_map.json and generation_config.json
when present. Optimizer state and other files of a training checkpoint are
left behind.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
import safetensors_py  # noqa: E402


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = argv
    os.makedirs(dst, exist_ok=True)
    tensors = safetensors_py.read_model_dir(src)
    safetensors_py.write_file(os.path.join(dst, "model.safetensors"), sorted(tensors.items()), "BF16")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    print("to_bf16: %s -> %s (%d tensors)" % (src, dst, len(tensors)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
