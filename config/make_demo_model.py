#!/usr/bin/env python3
"""make_demo_model.py — writes config/demo.safetensors, the model attnd serves out of
the box: one nn.MultiheadAttention(embed_dim=64, num_heads=8) layer with PyTorch
state_dict names, F32. Standard library only (runs with any python3) and
deterministic: values come from a fixed 64-bit LCG, scaled like PyTorch's init
(xavier_uniform_ for in_proj_weight, kaiming_uniform_(a=sqrt(5)) for
out_proj.weight, i.e. U(-1/sqrt(E), 1/sqrt(E))). PyTorch zeroes the biases; here
they are small non-zero values so the demo exercises them.
Usage: python3 config/make_demo_model.py [output path]"""
import json
import math
import os
import struct
import sys

E, HEADS = 64, 8


class Lcg:
    """Knuth's MMIX LCG; uniform() takes the top 24 bits, exact in float32."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def uniform(self, lo, hi):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return lo + (hi - lo) * ((self.state >> 40) / float(1 << 24))


def tensor(rng, n, bound):
    return [rng.uniform(-bound, bound) for _ in range(n)]


def serialize(entries, metadata):
    """entries: list of (name, shape, floats). Returns safetensors bytes (F32, LE)."""
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, shape, values in entries:
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "demo.safetensors")
    rng = Lcg(0x61747464)  # "attd"
    entries = [
        ("in_proj_weight", [3 * E, E], tensor(rng, 3 * E * E, math.sqrt(6.0 / (E + 3 * E)))),
        ("in_proj_bias", [3 * E], tensor(rng, 3 * E, 0.1)),
        ("out_proj.weight", [E, E], tensor(rng, E * E, 1.0 / math.sqrt(E))),
        ("out_proj.bias", [E], tensor(rng, E, 0.1)),
    ]
    meta = {"num_heads": str(HEADS),
            "description": "attnd demo model: nn.MultiheadAttention(embed_dim=64, num_heads=8), "
                           "deterministic pseudo-random weights from config/make_demo_model.py"}
    with open(out, "wb") as f:
        f.write(serialize(entries, meta))
    print("wrote %s" % out)


if __name__ == "__main__":
    main()
