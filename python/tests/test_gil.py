"""Batched and threaded fills: 256 matchers filled from an 8-thread pool, and by one
`fill_masks` call, give rows bit-equal to a serial fill; the GIL is released while
masks are computed (another Python thread runs meanwhile). How long each fill takes is
a benchmark, not a test: python/benches/fill_masks.py."""

import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import formwork

SCHEMAS = [
    {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}}}, "required": ["id", "tags"]},
    {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string", "format": "email"}, "age": {"type": ["integer", "null"]}}, "required": ["name"]},
    {"type": "array", "items": {"enum": ["red", "green", "blue", 7, None]}, "maxItems": 5},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"}, "price": {"type": "number", "minimum": 0}}, "required": ["when", "price"]},
    {"type": "object", "additionalProperties": {"type": "boolean"}},
    {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
    {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}]},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array", "items": {"type": "number"}}}}}},
]


def vocab(n=50_000, seed=7):
    """All single bytes, then n random ASCII/JSON-ish tokens, then EOS."""
    rng = random.Random(seed)
    alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "{}[]:,.-_@'
    seen = {bytes([b]) for b in range(256)}
    toks = [bytes([b]) for b in range(256)]
    while len(toks) < n:
        t = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 8))).encode()
        if t not in seen:
            seen.add(t)
            toks.append(t)
    toks.append(b"")
    return formwork.Tokenizer.from_token_bytes(toks, eos_ids=[len(toks) - 1])


def walked_matchers(tok, compiler, count=256, seed=1):
    """`count` matchers over SCHEMAS, each advanced a random number of random tokens."""
    rng = random.Random(seed)
    grammars = [compiler.json_schema(s) for s in SCHEMAS]
    eos = tok.eos_ids[0]
    out = []
    for i in range(count):
        m = grammars[i % len(grammars)].matcher()
        for _ in range(rng.randint(0, 12)):
            allowed = [t for t in m.allowed_tokens() if t != eos]
            if not allowed:
                break
            m.commit_tokens([rng.choice(allowed)])
        out.append(m)
    return out


def test_pool_and_batch_equal_serial():
    tok = vocab()
    ms = walked_matchers(tok, formwork.Compiler(tok))
    rows = [(m, i) for i, m in enumerate(ms)]
    serial = formwork.allocate_bitmask(len(ms), tok.vocab_size)
    pool = formwork.allocate_bitmask(len(ms), tok.vocab_size)
    batch = formwork.allocate_bitmask(len(ms), tok.vocab_size)

    for i, m in enumerate(ms):
        m.fill_mask(serial, i)
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: ms[i].fill_mask(pool, i), range(len(ms))))
    formwork.fill_masks(rows, batch)
    assert np.array_equal(serial, pool)
    assert np.array_equal(serial, batch)
    # Rows differ between states (the test would pass vacuously on one repeated row).
    assert len({r.tobytes() for r in serial}) > 50
    for i in (0, 77, 255):
        allowed = np.flatnonzero(np.unpackbits(serial[i].view(np.uint8), bitorder="little"))
        assert allowed.tolist() == ms[i].allowed_tokens()


def test_gil_is_released_while_filling():
    tok = vocab(seed=8)
    # Cold grammars (a fresh compiler each), compiled before the test starts: their
    # first masks are computed inside the fill calls.
    batches = []
    for _ in range(40):
        c = formwork.Compiler(tok)
        batches.append([(c.json_schema(s).matcher(), i) for i, s in enumerate(SCHEMAS)])
    bm = formwork.allocate_bitmask(len(SCHEMAS), tok.vocab_size)
    ev1, ev2, got = threading.Event(), threading.Event(), []

    def waiter():
        ev1.wait()
        got.append(1)
        ev2.wait()
        got.append(2)

    old = sys.getswitchinterval()
    # No forced switches: the waiter, once woken, runs only when this thread lets go.
    sys.setswitchinterval(100.0)
    th = threading.Thread(target=waiter)
    th.start()
    try:
        time.sleep(0.01)
        ev1.set()
        sum(range(3_000_000))  # a C call that keeps the GIL: the control
        after_control = list(got)
        time.sleep(0.05)  # lets the waiter take its turn and wait again
        ev2.set()
        calls = 0
        for rows in batches:
            formwork.fill_masks(rows, bm)
            calls += 1
            if len(got) == 2:
                break
        after_fill = list(got)
    finally:
        sys.setswitchinterval(old)
        ev1.set()
        ev2.set()
        th.join()
    assert after_control == [1] or after_control == [], after_control
    assert after_control == [], "the control held the GIL: the waiter could not run"
    assert after_fill == [1, 2], f"the waiter ran during one of {calls} fill_masks calls"
