#!/usr/bin/env python3
"""Bytes of weights a decode step reads from a GGUF file: every tensor but the token
embedding (one row of it per token), or the embedding too when the file has no
`output.weight` (it is then the output matrix, read whole). Prints the number of bytes.

    python3 benches/gguf_weights.py FILE.gguf

Reads only the header (metadata and tensor infos). Block sizes are ggml's.
"""

import struct
import sys

# ggml type id -> (elements per block, bytes per block)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 15: (256, 292), 30: (1, 2)}
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def main(path):
    with open(path, "rb") as f:
        def take(fmt):
            n = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(n))

        def string():
            (n,) = take("Q")
            return f.read(n).decode("utf-8", "replace")

        def value(t):
            if t == 8:
                return string()
            if t == 9:
                (et, n) = take("IQ")
                return [value(et) for _ in range(n)]
            return take(SCALARS[t])[0]

        if f.read(4) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        (version, n_tensors, n_kv) = take("IQQ")
        for _ in range(n_kv):
            string()
            (t,) = take("I")
            value(t)
        sizes = {}
        for _ in range(n_tensors):
            name = string()
            (nd,) = take("I")
            dims = take("Q" * nd)
            (t, _offset) = take("IQ")
            if t not in TYPES:
                sys.exit(f"{path}: tensor {name}: ggml type {t} not known here")
            per, nbytes = TYPES[t]
            elems = 1
            for d in dims:
                elems *= d
            sizes[name] = elems // per * nbytes
    read = sum(v for k, v in sizes.items() if k != "token_embd.weight")
    if "output.weight" not in sizes:
        read += sizes.get("token_embd.weight", 0)
    print(read)


if __name__ == "__main__":
    main(sys.argv[1])
