#!/usr/bin/env python3
"""`formwork serve` beside llama.cpp's `llama-server` on the same requests (benchmark, not a test).

Both servers get the same GGUF, the same threads and the same OpenAI chat requests: public
SNIPS records (../shared/data/extraction/snips_public.jsonl), each with its own schema as
`response_format` `json_schema` (three schemas, interleaved), greedy (`temperature` 0), the
same `max_tokens`. One server runs at a time, restarted for each concurrency level: formwork
with `--parallel C`, llama-server with `--parallel C` and `-c C * ctx_per_slot` (the same
context per slot). Before each level one request per schema warms the server (not counted).
For each server and level it reports requests/minute (requests / wall time of the level),
p50 and p99 latency (nearest rank), the share of answers that are schema-valid (HTTP 200,
the content parses as JSON and validates against the request's schema with the `jsonschema`
package, formats checked; anything else counts as not valid), the `finish_reason`s and the
mean prompt and completion tokens as each server counts them.

The request text is the same for both: the system message is formwork's extraction prompt in
its `json-schema` style (task, the schema as JSON, the rules), the user message the record.
formwork serve also adds its schema outline to the system message (what it always does), so
its prompts are longer.

Python 3 stdlib plus `jsonschema` (in .venv-test). Example (README, "Serving"):

    .venv-test/bin/python benches/serve_bench.py --model qwen2.5-coder-0.5b \
        --concurrency 1,4,16 --out /work/runs/serve/qwen

`--request-file FILE` sends the requests `formwork bench --requests-out FILE` wrote instead:
formwork's own extraction messages (its outline prompt, the worked examples picked for each
record, the record), the schema as a strict `json_schema` response format, its `max_tokens`
and temperature. Then each level sends every request once, in the file's order, with no
warm-up (as `formwork bench` times from its first record), and the row gives records/minute
to set beside `formwork bench --parallel C` on the same file's records (README "Speed"):

    target/release/formwork bench --dataset ../shared/data/extraction/snips_public.jsonl \
        --modes masked --max-tokens 512 \
        --examples ../shared/data/extraction/snips_train_examples.jsonl \
        --requests-out /work/runs/snips-requests.jsonl
    .venv-test/bin/python benches/serve_bench.py --servers llama-server --concurrency 2,4 \
        --request-file /work/runs/snips-requests.jsonl --out /work/runs/serve/snips

Raw outputs go to --out: one JSONL per server and level (every request with its answer),
the servers' logs, and summary.json / summary.md.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# src/engine/prompt.rs, `system_message` with PromptStyle::JsonSchema.
NULL_POLICY = (
    "Null policy: a field is null unless the document itself states its value. Do not guess, "
    "do not infer, do not reuse a value that belongs to another field, and never write a "
    "field's name or description as its value. When in doubt, write null."
)


def system_message(schema):
    return (
        "You extract information from the user's document into JSON.\n"
        "Reply with one JSON object that matches this JSON Schema, and nothing else:\n"
        + json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        + "\nRules: copy values from the document exactly as written, unless a field says to "
        "convert them (numbers, lowercase, dates). " + NULL_POLICY
    )


def load_records(path, n):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = {}
    for r in rows:
        by.setdefault(r["schema_name"], []).append(r)
    # Round-robin over the schemas so every level mixes them.
    out, names = [], sorted(by)
    i = 0
    while len(out) < len(rows):
        for name in names:
            if i < len(by[name]):
                out.append(by[name][i])
        i += 1
    return out[:n] if n else out


def load_request_file(path):
    """`formwork bench --requests-out` lines as records: id, schema_name, schema, request."""
    out = []
    for n, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            req = row["request"]
            schema = req["response_format"]["json_schema"]["schema"]
        except (ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{path}:{n}: not a `formwork bench --requests-out` line with a json_schema ({e})")
        out.append({"id": row["id"], "schema_name": row["schema_name"], "schema": schema, "request": req})
    return out


def body_for(rec, model, max_tokens):
    if "request" in rec:  # --request-file: formwork's own request, as written
        return dict(rec["request"], model=model)
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": system_message(rec["schema"])},
            {"role": "user", "content": rec["text"]},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": rec["schema_name"], "strict": True, "schema": rec["schema"]},
        },
        "max_tokens": max_tokens,
        "temperature": 0,
    }


def post(port, body, timeout):
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=data,
        headers={"Content-Type": "application/json"},
    )
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode("utf-8", "replace")
    except Exception as e:  # a refused or dropped connection: a failed request
        status, text = 0, f"{type(e).__name__}: {e}"
    return status, text, time.perf_counter() - t


def judge(rec, status, text):
    """(valid, content, finish_reason, prompt_tokens, completion_tokens, error)."""
    if status != 200:
        return False, None, None, None, None, text[:300]
    try:
        v = json.loads(text)
        choice = v["choices"][0]
        content = choice["message"]["content"] or ""
        usage = v.get("usage") or {}
    except Exception as e:
        return False, None, None, None, None, f"bad response: {e}"
    pt, ct, fr = usage.get("prompt_tokens"), usage.get("completion_tokens"), choice.get("finish_reason")
    try:
        obj = json.loads(content)
    except Exception as e:
        return False, content, fr, pt, ct, f"not JSON: {e}"
    cls = jsonschema.validators.validator_for(rec["schema"])
    errs = list(cls(rec["schema"], format_checker=cls.FORMAT_CHECKER).iter_errors(obj))
    if errs:
        return False, content, fr, pt, ct, "; ".join(e.message for e in errs[:3])[:300]
    return True, content, fr, pt, ct, None


def wait_ready(port, proc, log, limit=600):
    t = time.time()
    while time.time() - t < limit:
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}) while loading; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return time.time() - t
        except Exception:
            pass
        time.sleep(0.25)
    raise SystemExit(f"server not ready after {limit} s; see {log}")


def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(server, args, c, port, log):
    env = dict(os.environ)
    env["CANDLE_BARRIER_POOL_SPIN_LIMIT"] = "0"
    if server == "formwork":
        env["CANDLE_NUM_THREADS"] = env["RAYON_NUM_THREADS"] = str(args.threads)
        cmd = [args.formwork, "serve", "--model", args.model, "--port", str(port),
               "--parallel", str(c), "--max-queue", str(max(c, 16)), "--log", log]
        out = open(log + ".stderr", "w")
    else:
        cmd = [args.llama_server, "-m", args.gguf, "--host", "127.0.0.1", "--port", str(port),
               "-t", str(args.threads), "-tb", str(args.threads), "--parallel", str(c),
               "-c", str(c * args.ctx_per_slot), "--no-webui"]
        out = open(log, "w")
    if args.nice:
        cmd = ["nice", "-n", str(args.nice)] + cmd
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, cmd


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_level(server, args, c, records, model_name):
    port = free_port()
    tag = f"{server}-c{c}"
    log = os.path.join(args.out, f"{tag}.log")
    proc, cmd = start(server, args, c, port, log)
    try:
        load_s = wait_ready(port, proc, log)
        # Warm-up: one request per schema (grammar compiled / cached), not counted; none
        # for --request-file, whose rows compare with `formwork bench`'s whole wall time.
        seen = {}
        for r in records:
            seen.setdefault(r["schema_name"], r)
        for r in ([] if args.request_file else seen.values()):
            post(port, body_for(r, model_name, args.max_tokens), args.timeout)
        n = args.requests or (len(records) if args.request_file else max(16, 2 * c))
        batch = [records[i % len(records)] for i in range(n)]
        results = [None] * n
        lock = threading.Lock()
        t0 = time.perf_counter()

        def one(i):
            rec = batch[i]
            status, text, secs = post(port, body_for(rec, model_name, args.max_tokens), args.timeout)
            valid, content, fr, pt, ct, err = judge(rec, status, text)
            row = {"i": i, "id": rec["id"], "schema": rec["schema_name"], "status": status,
                   "latency_s": round(secs, 3), "valid": valid, "finish_reason": fr,
                   "prompt_tokens": pt, "completion_tokens": ct, "content": content, "error": err}
            with lock:
                results[i] = row

        with ThreadPoolExecutor(max_workers=c) as ex:
            list(ex.map(one, range(n)))
        wall = time.perf_counter() - t0
    finally:
        stop(proc)
    with open(os.path.join(args.out, f"{tag}.jsonl"), "w") as f:
        for row in results:
            f.write(json.dumps(row) + "\n")
    lat = sorted(r["latency_s"] for r in results)

    def rank(q):  # nearest rank: the smallest latency with at least q of them at or below it
        return lat[max(0, math.ceil(q * len(lat)) - 1)]

    def mean(k):
        xs = [r[k] for r in results if isinstance(r[k], int)]
        return round(sum(xs) / len(xs), 1) if xs else None

    fins = {}
    for r in results:
        k = str(r["finish_reason"]) if r["status"] == 200 else f"HTTP {r['status']}"
        fins[k] = fins.get(k, 0) + 1
    return {
        "server": server, "concurrency": c, "requests": n, "wall_s": round(wall, 2),
        "load_s": round(load_s, 2), "req_per_min": round(n / wall * 60, 2),
        "p50_s": round(rank(0.50), 2), "p99_s": round(rank(0.99), 2),
        "valid": sum(r["valid"] for r in results), "valid_share": round(sum(r["valid"] for r in results) / n, 3),
        "finish": fins, "prompt_tokens_mean": mean("prompt_tokens"),
        "completion_tokens_mean": mean("completion_tokens"), "command": " ".join(cmd),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="registry name (formwork) whose GGUF llama-server loads")
    ap.add_argument("--gguf", default="", help="the GGUF llama-server loads (default: formwork's cached file of --model)")
    ap.add_argument("--formwork", default=os.path.join(ROOT, "target/release/formwork"))
    ap.add_argument("--llama-server", default="/work/llamacpp/build/bin/llama-server")
    ap.add_argument("--servers", default="formwork,llama-server")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=0, help="per level (default: max(16, 2 x concurrency))")
    ap.add_argument("--records", type=int, default=0, help="use the first N records (round-robin over schemas; default all)")
    ap.add_argument("--request-file", default="",
                    help="`formwork bench --requests-out` JSONL: send these requests, each once per level")
    ap.add_argument("--dataset", default=os.path.join(ROOT, "../shared/data/extraction/snips_public.jsonl"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-per-slot", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--nice", type=int, default=0, help="run the servers under nice -n N")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if not args.gguf:
        # `formwork models list`: the name's entry, then a line ending in its cached path.
        lines = subprocess.run([args.formwork, "models", "list"], check=True,
                               capture_output=True, text=True).stdout.splitlines()
        for i, line in enumerate(lines):
            if line.split() and line.split()[0] == args.model and i + 1 < len(lines):
                args.gguf = lines[i + 1].split()[-1]
        if not args.gguf or not os.path.isfile(args.gguf):
            raise SystemExit(f"{args.model}: no cached GGUF (formwork models fetch {args.model}), or pass --gguf")
    if args.request_file:
        records = load_request_file(args.request_file)
        records = records[: args.records] if args.records else records
    else:
        records = load_records(args.dataset, args.records)
    rows = []
    for c in [int(x) for x in args.concurrency.split(",")]:
        for server in args.servers.split(","):
            row = run_level(server, args, c, records, args.model)
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = {"model": args.model, "gguf": args.gguf, "threads": args.threads,
            "ctx_per_slot": args.ctx_per_slot, "max_tokens": args.max_tokens,
            "dataset": args.request_file or args.dataset, "argv": sys.argv, "loadavg_end": os.getloadavg(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    json.dump({"meta": meta, "rows": rows}, open(os.path.join(args.out, "summary.json"), "w"), indent=1)
    lines = ["| server | clients | requests | req/min | p50 s | p99 s | schema-valid | finish | prompt tok | completion tok |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fin = ", ".join(f"{k} {v}" for k, v in sorted(r["finish"].items()))
        lines.append(f"| {r['server']} | {r['concurrency']} | {r['requests']} | {r['req_per_min']} | {r['p50_s']} | "
                     f"{r['p99_s']} | {r['valid']}/{r['requests']} ({100 * r['valid_share']:.0f}%) | {fin} | "
                     f"{r['prompt_tokens_mean']} | {r['completion_tokens_mean']} |")
    md = "\n".join(lines)
    open(os.path.join(args.out, "summary.md"), "w").write(md + "\n")
    print(md)


if __name__ == "__main__":
    sys.exit(main())
