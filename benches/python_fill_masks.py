"""Batched mask fill, formwork's Python package against llguidance's, in one run.

    python benches/python_fill_masks.py --tokenizers DIR [--rows 64,256] [--steps 30]

DIR holds NAME.tokenizer.json and NAME.meta.json for qwen2.5-coder-0.5b (152k ids) and
gemma3-270m (262k ids), written by `cargo run --example tokenizer_json -- NAME DIR`.
Rows are matchers over JSONSchemaBench schemas (Github_easy, Glaiveai2K, Kubernetes) that
both compile with compact whitespace. Each step fills every row with formwork
(`fill_masks`) and with llguidance (`LLExecutor`, its batched fill), then advances every
row by one random token both allow (a finished row starts again), so each fill meets new
states as in decoding. Figures: wall time per call, median and p99 over the steps, and
the p99 of one row's `fill_mask` alone. Not a test: nothing is asserted.
"""

import argparse
import json
import pathlib
import random
import statistics
import sys
import time

import numpy as np

import formwork
import llguidance

ROOT = pathlib.Path(__file__).resolve().parents[1]
LL_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def schemas(bench, want):
    out = []
    for sub in ("Github_easy", "Glaiveai2K", "Kubernetes"):
        out += sorted((bench / sub).glob("*.json"))[: want]
    return out


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))]


def run(name, tdir, bench, rows_list, steps, seed):
    meta = json.loads((tdir / f"{name}.meta.json").read_text())
    tj = str(tdir / f"{name}.tokenizer.json")
    vocab, eos = meta["vocab_size"], meta["eos_ids"]
    t0 = time.perf_counter()
    tok = formwork.Tokenizer.from_hf(tj, eos_ids=eos, vocab_size=vocab)
    t_fw_tok = time.perf_counter() - t0
    t0 = time.perf_counter()
    lltok = llguidance.LLTokenizer(tj, n_vocab=vocab, eos_token=eos)
    t_ll_tok = time.perf_counter() - t0
    comp = formwork.Compiler(tok)
    pairs = []
    for p in schemas(bench, 40):
        text = p.read_text()
        try:
            g = comp.json_schema(text)
        except formwork.CompileError:
            continue
        grm = llguidance.LLMatcher.grammar_from_json_schema(text, overrides=LL_OPTIONS)
        if llguidance.LLMatcher(lltok, grm, log_level=0).is_error():
            continue
        pairs.append((g, grm))
    ex = llguidance.LLExecutor()
    words = (vocab + 31) // 32
    print(f"## {name}: vocab {vocab} ({words} words a row), {len(pairs)} schemas both compile; "
          f"tokenizer load formwork {t_fw_tok:.2f} s, llguidance {t_ll_tok:.2f} s")
    for nrows in rows_list:
        rng = random.Random(seed)
        rows = []
        for i in range(nrows):
            g, grm = pairs[i % len(pairs)]
            rows.append([g.matcher(), llguidance.LLMatcher(lltok, grm, log_level=0)])
        fw_bm = np.zeros((nrows, words), dtype=np.int32)
        ll_bm = np.zeros((nrows, words), dtype=np.int32)
        fw_t, ll_t, row_t = [], [], []
        for step in range(steps):
            t0 = time.perf_counter()
            formwork.fill_masks([(m, i) for i, (m, _) in enumerate(rows)], fw_bm)
            fw_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ex.unsafe_compute_mask_ptr([(lm, i) for i, (_, lm) in enumerate(rows)],
                                       ll_bm.ctypes.data, words * 4, nrows)
            ll_t.append(time.perf_counter() - t0)
            if step == steps - 1:
                # One row at a time, for the p99 row (states already cached: a lower bound).
                one = np.zeros((1, words), dtype=np.int32)
                for m, _ in rows:
                    t0 = time.perf_counter()
                    m.fill_mask(one, 0)
                    row_t.append(time.perf_counter() - t0)
            both = np.unpackbits((fw_bm & ll_bm).view(np.uint8), axis=1, bitorder="little")[:, :vocab]
            for i, (m, lm) in enumerate(rows):
                choices = [int(t) for t in np.flatnonzero(both[i]) if int(t) not in eos]
                if not choices or m.is_finished():
                    m.reset()
                    lm.reset()
                    continue
                t = rng.choice(choices)
                m.commit_tokens([t])
                if not lm.consume_token(t):
                    m.reset()
                    lm.reset()
        ms = lambda xs: f"median {statistics.median(xs)*1e3:.2f} ms, p99 {p99(xs)*1e3:.2f} ms"
        print(f"- {nrows} rows, {steps} steps: formwork fill_masks {ms(fw_t)} "
              f"(first {fw_t[0]*1e3:.1f} ms); llguidance LLExecutor {ms(ll_t)} "
              f"(first {ll_t[0]*1e3:.1f} ms); formwork one row p99 {p99(row_t)*1e6:.0f} us")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", required=True, type=pathlib.Path)
    ap.add_argument("--shared", type=pathlib.Path, default=ROOT.parent / "shared")
    ap.add_argument("--models", default="qwen2.5-coder-0.5b,gemma3-270m")
    ap.add_argument("--rows", default="64,256")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    bench = a.shared / "data" / "jsonschemabench"
    print(f"formwork threads {formwork.num_threads()}")
    for name in a.models.split(","):
        run(name, a.tokenizers, bench, [int(r) for r in a.rows.split(",")], a.steps, a.seed)


if __name__ == "__main__":
    main()
