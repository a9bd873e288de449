#!/usr/bin/env python3
"""llama.cpp reference timings on the same GGUF files formwork runs (benchmark, not a test).

Measures prefill tokens/s (one batch over the prompt), decode tokens/s (greedy, one token per
step, EOS ignored) and the peak RSS of the process, through llama-cpp-python. The package is
not a formwork dependency; install it into a throw-away venv:

    python3 -m venv /tmp/llamavenv && /tmp/llamavenv/bin/pip install llama-cpp-python
    /tmp/llamavenv/bin/python benches/llamacpp_bench.py --model PATH.gguf --threads 1

(the pip install compiles llama.cpp: about 20 minutes on 2 cores). Prints one JSON line.
benches/decode_bench.sh runs it beside formwork with the same prompt and lengths.
"""
import argparse
import json
import resource
import sys
import time

from llama_cpp import Llama

# The same prompt text as benches/decode_bench.sh (about 200 tokens).
PROMPT = open(__file__.replace("llamacpp_bench.py", "prompt.txt")).read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3, help="best of N")
    args = ap.parse_args()

    t0 = time.perf_counter()
    llm = Llama(
        model_path=args.model,
        n_ctx=2048,
        n_batch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    load_s = time.perf_counter() - t0
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
    tokens = llm.tokenize(PROMPT.encode(), add_bos=add_bos, special=True)

    best_prefill, best_decode = 0.0, 0.0
    for _ in range(args.runs):
        llm.reset()
        t = time.perf_counter()
        llm.eval(tokens)
        prefill = len(tokens) / (time.perf_counter() - t)
        # Greedy decode, one token per eval, EOS ignored: a fixed number of steps.
        t = time.perf_counter()
        for _ in range(args.gen_tokens):
            logits = llm.scores[llm.n_tokens - 1]
            nxt = int(logits.argmax())
            llm.eval([nxt])
        decode = args.gen_tokens / (time.perf_counter() - t)
        best_prefill = max(best_prefill, prefill)
        best_decode = max(best_decode, decode)

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "engine": "llama.cpp (llama-cpp-python)",
        "model": args.model,
        "threads": args.threads,
        "prompt_tokens": len(tokens),
        "gen_tokens": args.gen_tokens,
        "load_s": round(load_s, 2),
        "prefill_tok_s": round(best_prefill, 1),
        "decode_tok_s": round(best_decode, 1),
        "peak_rss_mb": round(rss_mb, 1),
    }))


if __name__ == "__main__":
    sys.exit(main())
