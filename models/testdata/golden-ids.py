"""Records llama.cpp's token ids for the golden strings on a GGUF file, as NAME.golden-ids.json.

The strings are the 322 of smollm2-135m.golden-ids.json (the same for every model). Each one
goes through llama.cpp's own `llama-tokenize` as a file, byte for byte, with the settings the
other fixtures were made with: no BOS added, special tokens parsed (the tool's default), no
escape processing:

    llama-tokenize -m MODEL.gguf -f TEXT --ids --no-bos --no-escape --log-disable

Run on the SmolLM2 GGUF it gives smollm2-135m.golden-ids.json again, id for id.

llama.cpp is not a dependency of formwork. Build `llama-tokenize` outside the repository, for
example from the sources vendored in the llama-cpp-python sdist:

    python3 -m pip download --no-deps --no-binary llama-cpp-python llama-cpp-python -d /work/llamacpp
    tar xzf llama_cpp_python-*.tar.gz
    cmake -S llama_cpp_python-*/vendor/llama.cpp -B build -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF ...
    cmake --build build -j2 --target llama-tokenize

then, from the repository root:

    python3 models/testdata/golden-ids.py /work/llamacpp/build/bin/llama-tokenize \\
        ~/.cache/formwork/models/qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        qwen2.5-coder-0.5b > models/testdata/qwen2.5-coder-0.5b.golden-ids.json
"""
import concurrent.futures
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def n_vocab(path):
    """The length of `tokenizer.ggml.tokens`, read from the GGUF header."""
    with open(path, "rb") as f:

        def read(fmt):
            fmt = "<" + fmt
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def skip(t):
            sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
            if t == 8:
                f.seek(read("Q"), 1)
            elif t == 9:
                et, n = read("I"), read("Q")
                if et in sizes:
                    f.seek(sizes[et] * n, 1)
                else:
                    for _ in range(n):
                        skip(et)
            else:
                f.seek(sizes[t], 1)

        if f.read(4) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        read("I")  # version
        read("Q")  # tensor count
        for _ in range(read("Q")):
            key = f.read(read("Q")).decode()
            t = read("I")
            if key == "tokenizer.ggml.tokens" and t == 9:
                read("I")
                return read("Q")
            skip(t)
    sys.exit(f"{path}: no tokenizer.ggml.tokens")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: golden-ids.py LLAMA_TOKENIZE MODEL.gguf NAME > NAME.golden-ids.json")
    tokenize, model, name = sys.argv[1:]
    with open(os.path.join(HERE, "smollm2-135m.golden-ids.json"), encoding="utf-8") as f:
        texts = [c["text"] for c in json.load(f)["cases"]]
    with tempfile.TemporaryDirectory() as tmp:

        def ids(i):
            path = os.path.join(tmp, f"{i}.txt")
            with open(path, "wb") as f:
                f.write(texts[i].encode("utf-8"))
            out = subprocess.run(
                [tokenize, "-m", model, "-f", path, "--ids", "--no-bos", "--no-escape",
                 "--log-disable"],
                capture_output=True, check=True,
            ).stdout.decode()
            # The ids are the one line that is a Python list: [1, 2, 3].
            line = [l for l in out.splitlines() if l.startswith("[")]
            if len(line) != 1:
                sys.exit(f"case {i}: llama-tokenize printed {out!r}")
            return json.loads(line[0])

        # One process per string, a few at a time (each loads the vocabulary).
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            all_ids = list(pool.map(ids, range(len(texts))))
    cases = [{"text": t, "ids": i} for t, i in zip(texts, all_ids)]
    golden = {
        "model": name,
        "source": "token ids from llama.cpp (llama_tokenize, add_special=false, parse_special=true) "
        "on the GGUF file: llama-tokenize --ids --no-bos --no-escape, "
        "made by models/testdata/golden-ids.py",
        "n_vocab": n_vocab(model),
        "cases": cases,
    }
    sys.stdout.write(json.dumps(golden, ensure_ascii=False))


if __name__ == "__main__":
    main()
