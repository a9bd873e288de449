#!/usr/bin/env python3
"""formwork serve against llama.cpp's llama-server: the same GGUF, the same requests.

Starts each server in turn on a loopback port, sends the same chat completions with
`response_format: json_schema` (three schemas, round robin) at 1, 4 and 16 concurrent
clients, and prints requests per minute, p50/p99 latency, and the share of answers that
are 200 and valid under their schema (checked here with the `jsonschema` package, not by
either server). A benchmark, not a test: numbers depend on the machine.

    python3 scripts/bench_serve.py --formwork target/release/formwork \
        --llama-server /path/to/llama-server \
        --gguf ~/.cache/formwork/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf \
        --model smollm2-135m --requests 16 --max-tokens 64

Needs Python 3 with `jsonschema` (the .venv-test that scripts/test makes has it).
"""

import argparse
import concurrent.futures as cf
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

import jsonschema

SCHEMAS = [
    (
        "Person",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "age": {"type": "integer", "minimum": 0, "maximum": 130},
                "role": {"enum": ["engineer", "poet", "mathematician"]},
            },
            "required": ["name", "age", "role"],
            "additionalProperties": False,
        },
        "Ada Lovelace, a mathematician, died at 36.",
    ),
    (
        "Order",
        {
            "type": "object",
            "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                "express": {"type": "boolean"},
            },
            "required": ["sku", "qty", "express"],
            "additionalProperties": False,
        },
        "Please send 3 boxes of ABC-123, express delivery.",
    ),
    (
        "Review",
        {
            "type": "object",
            "properties": {
                "stars": {"type": "integer", "minimum": 1, "maximum": 5},
                "summary": {"type": "string", "maxLength": 60},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
            },
            "required": ["stars", "summary", "tags"],
            "additionalProperties": False,
        },
        "Great little kettle, boils fast, but the lid is flimsy. Four stars.",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    t = time.time()
    while time.time() - t < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.3)
    raise SystemExit("server not ready in time")


def one(url: str, model: str, i: int, max_tokens: int):
    name, schema, text = SCHEMAS[i % len(SCHEMAS)]
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You turn the user's text into JSON."},
            {"role": "user", "content": text},
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}},
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t = time.time()
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            data = json.load(r)
            status = r.status
    except urllib.error.HTTPError as e:
        return time.time() - t, False, f"HTTP {e.code}"
    except Exception as e:  # noqa: BLE001 - a benchmark records every failure
        return time.time() - t, False, repr(e)
    dt = time.time() - t
    if status != 200:
        return dt, False, f"HTTP {status}"
    content = data["choices"][0]["message"]["content"]
    try:
        jsonschema.validate(json.loads(content), schema)
        return dt, True, data["choices"][0]["finish_reason"]
    except Exception as e:  # noqa: BLE001
        return dt, False, f"invalid: {type(e).__name__}"


def pct(xs, p):
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def run_level(url, model, clients, n, max_tokens):
    t = time.time()
    with cf.ThreadPoolExecutor(clients) as ex:
        res = list(ex.map(lambda i: one(url, model, i, max_tokens), range(n)))
    wall = time.time() - t
    lat = [r[0] for r in res]
    valid = sum(r[1] for r in res)
    reasons = {}
    for r in res:
        reasons[r[2]] = reasons.get(r[2], 0) + 1
    return {
        "clients": clients,
        "requests": n,
        "rpm": n / wall * 60,
        "p50_s": statistics.median(lat),
        "p99_s": pct(lat, 99),
        "valid": valid / n,
        "outcomes": reasons,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--formwork", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--model", default="smollm2-135m", help="formwork's --model (the same file as --gguf)")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=2, help="--parallel / -np for both servers")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    levels = [int(x) for x in a.clients.split(",")]
    results = {}
    env = dict(os.environ, CANDLE_BARRIER_POOL_SPIN_LIMIT="0", CANDLE_NUM_THREADS=str(a.threads))
    for server in ["formwork", "llama-server"]:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        if server == "formwork":
            cmd = [a.formwork, "serve", "--model", a.model, "--port", str(port), "--parallel", str(a.parallel),
                   "--max-queue", "64", "--log", os.devnull]
            model = a.model
        else:
            cmd = [a.llama_server, "-m", a.gguf, "--port", str(port), "--host", "127.0.0.1", "-np", str(a.parallel),
                   "-t", str(a.threads), "-c", str(2048 * a.parallel), "--log-disable"]
            model = os.path.basename(a.gguf)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(url, proc)
            one(url, model, 0, a.max_tokens)  # warm-up, not counted
            results[server] = [run_level(url, model, c, a.requests, a.max_tokens) for c in levels]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("| server | clients | requests | req/min | p50 s | p99 s | valid | outcomes |")
    print("|---|---|---|---|---|---|---|---|")
    for server, rows in results.items():
        for r in rows:
            print(f"| {server} | {r['clients']} | {r['requests']} | {r['rpm']:.1f} | {r['p50_s']:.2f} | {r['p99_s']:.2f} "
                  f"| {r['valid'] * 100:.0f}% | {json.dumps(r['outcomes'])} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
