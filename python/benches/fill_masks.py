"""How long 256 mask rows take to fill (50k vocabulary, warm): the serial loop of
`Matcher.fill_mask`, an 8-thread Python pool, the pool's own cost (tasks doing nothing)
and one `fill_masks` call. Interleaved runs, medians and best runs printed. A figure,
not a test: python/tests/test_gil.py checks that the three fills give the same bits.

    .venv-python/bin/python python/benches/fill_masks.py [--runs 9]
"""

import argparse
import pathlib
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

import formwork  # noqa: E402
from test_gil import vocab, walked_matchers  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    tok = vocab()
    ms = walked_matchers(tok, formwork.Compiler(tok))
    rows = [(m, i) for i, m in enumerate(ms)]
    out = formwork.allocate_bitmask(len(ms), tok.vocab_size)

    def fill_serial():
        for i, m in enumerate(ms):
            m.fill_mask(out, i)

    with ThreadPoolExecutor(8) as ex:
        # The pool's threads start before any timing (they start lazily, on submit).
        list(ex.map(lambda i: None, range(64)))
        runs = {"serial": [], "pool": [], "noop pool": [], "fill_masks": []}
        for _ in range(args.runs):  # interleaved, so load on the machine hits each alike
            for name, f in (
                ("serial", fill_serial),
                ("pool", lambda: list(ex.map(lambda i: ms[i].fill_mask(out, i), range(len(ms))))),
                ("noop pool", lambda: list(ex.map(lambda i: None, range(len(ms))))),
                ("fill_masks", lambda: formwork.fill_masks(rows, out)),
            ):
                t0 = time.perf_counter()
                f()
                runs[name].append(time.perf_counter() - t0)
    print(f"256 rows, 50k vocab, warm, {args.runs} interleaved runs, {formwork.num_threads()} threads")
    print(f"{'':12} {'median ms':>10} {'best ms':>10} {'serial/this (median)':>22}")
    med = {k: statistics.median(v) * 1e3 for k, v in runs.items()}
    for k, v in runs.items():
        print(f"{k:12} {med[k]:10.2f} {min(v) * 1e3:10.2f} {med['serial'] / med[k]:22.2f}")


if __name__ == "__main__":
    main()
