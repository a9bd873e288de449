"""formwork's rows equal llguidance's LLMatcher rows over JSONSchemaBench schemas, along
an instance of each, with the same HF tokenizer.json (SmolLM2's, 49k ids) and the same
whitespace rules (none). Every difference is explained by a documented formwork policy
(difftools.explain), or the test fails and prints it."""

import json

import pytest

import formwork
from conftest import shared_dir
from difftools import LL_OPTIONS, closed, walk

llguidance = pytest.importorskip("llguidance")

SUBSETS = ["Glaiveai2K", "Github_easy", "Kubernetes", "Snowplow", "JsonSchemaStore"]
PER_SUBSET = 12


def corpus():
    bench = shared_dir()
    out = []
    for sub in SUBSETS:
        files = sorted((bench / sub).glob("*.json"))[:PER_SUBSET]
        out += files
    return out


def test_rows_equal_llguidance(smollm_files, smollm):
    tj, meta = smollm_files
    lltok = llguidance.LLTokenizer(str(tj), n_vocab=meta["vocab_size"], eos_token=meta["eos_ids"])
    compiler = formwork.Compiler(smollm)
    vocab, eos = smollm.vocab_size, meta["eos_ids"]
    compared, refused_fw, refused_ll, steps = 0, 0, 0, 0
    explained, failures = {}, []
    for i, path in enumerate(corpus()):
        text = path.read_text()
        try:
            g = compiler.json_schema(text)
        except formwork.CompileError:
            refused_fw += 1
            continue
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(closed(json.loads(text))), overrides=LL_OPTIONS
        )
        lm = llguidance.LLMatcher(lltok, grammar, log_level=0)
        if lm.is_error():
            refused_ll += 1
            continue
        n, unexplained, exp, prefix = walk(g, lm, lltok, vocab, eos, json.dumps(json.loads(text)), seed=i)
        compared += 1
        steps += n
        for k, v in exp.items():
            explained[k] = explained.get(k, 0) + v
        if unexplained:
            failures.append((path.parent.name + "/" + path.name, prefix, unexplained[:5]))
    print(f"\n{compared} schemas compared over {steps} steps; refused by formwork {refused_fw}, by llguidance {refused_ll}; explained token differences: {explained}")
    assert compared >= 20, "too few schemas both compile to compare"
    assert not failures, "unexplained differences:\n" + "\n".join(
        f"{name}: instance so far {prefix[:200]!r}\n  {diffs}" for name, prefix, diffs in failures
    )
