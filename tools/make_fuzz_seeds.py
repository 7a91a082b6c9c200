#!/usr/bin/env python3
"""make_fuzz_seeds.py — writes the seed corpora of libfuzzer/corpus/<target>/ (committed; rerun to
regenerate). Seeds are small on purpose: libFuzzer mutates a 2 KB model far more usefully than a
20 KB one. Each target gets valid inputs (so the fuzzer starts deep inside the parser) and a few
invalid ones next to the boundaries the loader checks.

The model seeds follow docs/spec/MODEL.md's table independently of model/ (so a bug in the
writer cannot hide the same bug in the reader). ci/fuzz.sh adds one more made by `attncheck init`.

Usage: python3 tools/make_fuzz_seeds.py [libfuzzer/corpus]
"""

import json
import os
import struct
import sys


def tensors_for(cfg: dict) -> list[tuple[str, list[int]]]:
    V, d, f, L, N = cfg["vocab_size"], cfg["d_model"], cfg["d_ff"], cfg["n_layers"], cfg["max_len"]
    out = [("embed.weight", [V, d])]
    if cfg["positional"] == "learned":
        out.append(("pos.weight", [N, d]))
    for i in range(L):
        p = f"layers.{i}"
        attns = ["self_attn"] + (["cross_attn"] if cfg["cross_attention"] == "true" else [])
        for a in attns:
            for w in "qkvo":
                out += [(f"{p}.{a}.{w}.weight", [d, d]), (f"{p}.{a}.{w}.bias", [d])]
        for n in ["norm_self"] + (["norm_cross"] if cfg["cross_attention"] == "true" else []):
            out += [(f"{p}.{n}.weight", [d]), (f"{p}.{n}.bias", [d])]
        out += [(f"{p}.ffn.fc1.weight", [f, d]), (f"{p}.ffn.fc1.bias", [f]),
                (f"{p}.ffn.fc2.weight", [d, f]), (f"{p}.ffn.fc2.bias", [d]),
                (f"{p}.norm_ffn.weight", [d]), (f"{p}.norm_ffn.bias", [d])]
    if cfg["norm"] == "pre":
        out += [("final_norm.weight", [d]), ("final_norm.bias", [d])]
    if cfg["tie_embeddings"] == "false":
        out.append(("lm_head.weight", [V, d]))
    return out


def safetensors(cfg: dict) -> bytes:
    header, blobs, offset = {"__metadata__": {k: str(v) for k, v in cfg.items()}}, [], 0
    for k, (name, shape) in enumerate(tensors_for(cfg)):
        n = 1
        for s in shape:
            n *= s
        data = struct.pack(f"<{n}f", *[((k * 7 + i * 3) % 11 - 5) / 10 for i in range(n)])
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def npy(descr: str, shape: tuple, values: bytes, version=(1, 0), fortran=False) -> bytes:
    d = (f"{{'descr': '{descr}', 'fortran_order': {fortran}, "
         f"'shape': ({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), }}")
    hlen_size = 2 if version[0] == 1 else 4
    total = 6 + 2 + hlen_size + len(d) + 1
    d += " " * (-total % 64) + "\n"
    hl = struct.pack("<H" if hlen_size == 2 else "<I", len(d))
    return b"\x93NUMPY" + bytes(version) + hl + d.encode("latin1") + values


BASE = {"format": "attncheck-decoder-1", "vocab_size": 4, "d_model": 4, "n_heads": 2, "d_ff": 4,
        "n_layers": 1, "max_len": 4, "norm": "post", "cross_attention": "false",
        "positional": "sinusoidal", "activation": "relu", "embed_scale": "sqrt_d_model",
        "tie_embeddings": "true", "ln_eps": "1e-5"}


def main(root: str) -> None:
    files = {}
    small = safetensors(BASE)
    files["model/valid_post_tied"] = small
    files["model/valid_pre_learned_cross_untied"] = safetensors(
        {**BASE, "norm": "pre", "positional": "learned", "cross_attention": "true",
         "tie_embeddings": "false", "activation": "gelu_tanh", "embed_scale": "1"})
    files["model/bad_truncated_data"] = small[:-7]
    files["model/bad_header_length_huge"] = struct.pack("<Q", 1 << 62) + small[8:]
    files["model/bad_n_heads"] = small.replace(b'"n_heads":"2"', b'"n_heads":"3"')

    f32 = struct.pack("<8f", *[0.5 * i - 1 for i in range(8)])
    files["npy/valid_f4_2x4"] = npy("<f4", (2, 4), f32)
    files["npy/valid_f8_v2_1x4"] = npy("<f8", (1, 4), struct.pack("<4d", 1, 2, 3, 4), (2, 0))
    files["npy/valid_f4_1d"] = npy("<f4", (8,), f32)
    files["npy/bad_fortran"] = npy("<f4", (2, 4), f32, fortran=True)
    files["npy/bad_int32"] = npy("<i4", (2, 4), f32)
    files["npy/bad_truncated"] = npy("<f4", (4, 4), f32)

    for i, text in enumerate(["1,2,3", "0", " 7 , 8 ", "31,0,31", "", "1,,2", "-1", "2147483647",
                              "2147483648", "1, 2, x", ",".join(["5"] * 40)]):
        files[f"tokens/seed_{i:02d}"] = text.encode()

    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    print(f"make_fuzz_seeds: wrote {len(files)} seeds under {root}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "libfuzzer", "corpus"))
