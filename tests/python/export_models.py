"""export_models.py — layers made by torch for tests/scripts/test_export.sh, as zero-argument
factories (the `module:attr` sources of tools/export/attnd-export) and saved files.

  /usr/bin/python3 tests/python/export_models.py DIR   writes DIR/enc.pt (a whole
      TransformerEncoderLayer), DIR/enc_sd.pt (its state_dict), DIR/dec.pt (a whole
      TransformerDecoderLayer) and DIR/wrong64.pt (an nn.MultiheadAttention(64, 8) that is
      not the demo model)."""
import os
import sys

import torch
from torch import nn


def _seeded(seed, make):
    torch.manual_seed(seed)
    m = make()
    with torch.no_grad():            # non-zero biases, so a dropped bias would show
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.2, 0.2)
    return m.eval()


def make_encoder():
    return _seeded(1, lambda: nn.TransformerEncoderLayer(d_model=32, nhead=4, batch_first=True))


def make_decoder():
    return _seeded(2, lambda: nn.TransformerDecoderLayer(d_model=48, nhead=6))


def make_kdim():
    return _seeded(3, lambda: nn.MultiheadAttention(32, 4, kdim=24, vdim=40, batch_first=True))


def make_nobias():
    return _seeded(4, lambda: nn.MultiheadAttention(32, 2, bias=False))


def make_stack():
    return _seeded(5, lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(d_model=16, nhead=2), num_layers=2, enable_nested_tensor=False))


def make_bias_kv():
    return _seeded(6, lambda: nn.MultiheadAttention(16, 2, add_bias_kv=True))


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.MultiheadAttention(16, 2)
        self.b = nn.MultiheadAttention(16, 4)


def make_two():
    return _seeded(7, Two)


def make_wrong64():
    return _seeded(8, lambda: nn.MultiheadAttention(64, 8))


if __name__ == "__main__":
    out = sys.argv[1]
    torch.save(make_encoder(), os.path.join(out, "enc.pt"))
    torch.save(make_encoder().state_dict(), os.path.join(out, "enc_sd.pt"))
    torch.save(make_decoder(), os.path.join(out, "dec.pt"))
    torch.save(make_wrong64(), os.path.join(out, "wrong64.pt"))
