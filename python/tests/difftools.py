"""The differential harness: formwork's rows against llguidance's LLMatcher rows, with the
same tokenizer.json, along an instance of each schema (a few random tokens both allow,
then formwork's shortest completion, tokenised by llguidance's tokenizer)."""

import json
import random
import re

import numpy as np

# Compact JSON on both sides: no whitespace, "," and ":" (formwork's compact form).
LL_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def closed(schema):
    """The schema with `additionalProperties: false` on every object that lists
    properties and says nothing of others (or `true`): formwork's documented reading of
    such an object (it writes no unlisted property; compile.rs module docs), given to llguidance
    so that policy is not counted as a difference (vLLM's disable_additional_properties
    does the same)."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if isinstance(schema.get("properties"), dict) and schema.get("additionalProperties", True) is True:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


def bits(words, vocab):
    return np.unpackbits(words.astype("<i4").view(np.uint8), bitorder="little")[:vocab].astype(bool)


def in_string(prefix: bytes) -> bool:
    inside, esc = False, False
    for b in prefix:
        if esc:
            esc = False
        elif b == 0x5C and inside:
            esc = True
        elif b == 0x22:
            inside = not inside
    return inside


NUMBER_BYTES = set(b"0123456789.eE+-")


def key_start(prefix, tok):
    """Whether `tok` starts or continues an object key (right after `{` or `,`, or as
    `{"` itself)."""
    if in_string(prefix):
        q = prefix.rfind(b'"')
        return prefix[:q].endswith((b"{", b",")) and not prefix[q + 1:].count(b'"')
    return (prefix.endswith((b"{", b",")) and tok.startswith(b'"')) or tok.startswith(b'{"')


def explain(schema_text, prefix, tok, llguidance_only, is_eos, forced):
    """The documented policy that makes formwork and llguidance differ on this token, or
    None (a bug). `forced`: formwork's forced bytes at this step."""
    s = in_string(prefix)
    if not llguidance_only:
        # formwork allows, llguidance refuses.
        if forced and not is_eos and (forced.startswith(tok) or tok.startswith(forced)):
            return ("forced: where the schema forces bytes, llguidance (canonical tokenizer) "
                    "allows only the first token of their canonical tokenization; formwork "
                    "allows every token that spells them")
        if key_start(prefix, tok) and re.search(r'"(oneOf|anyOf|allOf)"', schema_text):
            return ("order: under allOf/anyOf/oneOf formwork writes properties in the outer "
                    "schema's order, llguidance in the branch's")
        if s and b"\x7f" in tok:
            return "del: llguidance refuses U+007F raw in strings; JSON (and serde_json) write it raw"
        return None
    if is_eos:
        return None
    if key_start(prefix, tok) and '"patternProperties"' in schema_text:
        return "unlisted: formwork writes no key for patternProperties, llguidance does"
    if key_start(prefix, tok) and re.search(r'"(oneOf|anyOf|allOf)"', schema_text):
        return ("order: under allOf/anyOf/oneOf formwork writes properties in the outer "
                "schema's order, llguidance in the branch's")
    if s and b"\\" in tok:
        return "escape: formwork writes serde_json's escapes only (no \\/, no \\u for printable characters)"
    if not s:
        head = prefix.rstrip(b"0123456789.eE+-")
        in_number = prefix[len(head):] != b"" or (tok[:1] and tok[:1] in b"-0123456789")
        body = tok.split(b",")[0].split(b"}")[0].split(b"]")[0]
        if in_number and body and set(body) <= NUMBER_BYTES:
            return "number: formwork writes at most 15 digits, no exponent, no redundant forms"
    if '"format"' in schema_text and s:
        return "format: formwork's formats are sound subsets of their RFCs"
    return None


def walk(fw_grammar, ll_matcher, lltok, vocab, eos_ids, schema_text, seed, random_steps=8, max_steps=400):
    """Returns (steps compared, list of unexplained differences, dict of explained counts)."""
    rng = random.Random(seed)
    fm = fw_grammar.matcher()
    words = (vocab + 31) // 32
    row = np.zeros((1, words), dtype=np.int32)
    prefix = b""
    unexplained, explained, steps = [], {}, 0
    plan = None
    while steps < max_steps:
        fm.fill_mask(row, 0)
        f = bits(row[0], vocab)
        lb = np.frombuffer(ll_matcher.compute_bitmask(), dtype=np.int32)
        l = bits(lb, vocab)
        steps += 1
        forced = fm.forced_bytes()
        for t in np.flatnonzero(f != l):
            t = int(t)
            tb = lltok.decode_bytes([t]) if t not in eos_ids else b""
            why = explain(schema_text, prefix, tb, bool(l[t]), t in eos_ids, forced)
            if why is None:
                unexplained.append(
                    {"prefix": prefix.decode("utf-8", "replace"), "token": t, "bytes": tb,
                     "llguidance": bool(l[t]), "formwork": bool(f[t])}
                )
            else:
                key = why.split(":")[0]
                explained[key] = explained.get(key, 0) + 1
        if fm.is_terminated():
            break
        both = np.flatnonzero(f & l)
        if plan is None and steps > random_steps:
            comp = fm.shortest_completion()
            plan = list(lltok.tokenize_bytes(comp)) + [eos_ids[0]] if comp else [eos_ids[0]]
        if plan is not None:
            if not plan:
                break
            t = plan.pop(0)
        else:
            choices = [int(x) for x in both if int(x) not in eos_ids]
            if not choices:
                t = eos_ids[0]
            else:
                t = rng.choice(choices)
        if not (f[t] and l[t]):
            unexplained.append({"prefix": prefix.decode("utf-8", "replace"), "token": t,
                                "bytes": lltok.decode_bytes([t]), "walk": "next token refused",
                                "llguidance": bool(l[t]), "formwork": bool(f[t])})
            break
        fm.commit_tokens([t])
        assert ll_matcher.consume_token(t), ll_matcher.get_error()
        if t not in eos_ids:
            prefix += lltok.decode_bytes([t])
    return steps, unexplained, explained, prefix
