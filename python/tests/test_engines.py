"""The engine adapters, driven through the engines' own code.

Importing the adapters needs neither engine (no hard dependency). The other tests drive
them through SGLang's and vLLM's own objects: SGLang's CLI parser, its
``create_grammar_backend``, the backend's compile cache and ``SamplingBatchInfo``'s
batched vocab-mask path; vLLM's ``StructuredOutputManager`` with the backend assigned
before ``grammar_init`` (as vLLM's tests/v1/structured_output/
test_structured_output_manager.py does). Each engine wants torch and gigabytes of CUDA
wheels, too heavy for CI: where an engine is not installed its tests say SKIPPED with
the command that runs them (``python/scripts/engines_venv.sh``), and never count as
passed. With ``FORMWORK_ENGINE_TESTS=1`` a missing engine or tokenizer is a failure.

The model is a local directory (no Hugging Face hub): the qwen2.5-coder-0.5b tokenizer
that ``cargo run --example tokenizer_json`` writes from the GGUF (152k ids), a Qwen2
``config.json`` written here, and a ``tokenizer_config.json``.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import formwork

RUN = "python/scripts/engines_venv.sh"  # builds the engine venvs, runs this file in each
# FORMWORK_ENGINE_TESTS: "1" (both engines), or "sglang" / "vllm": those must run.
REQUIRED = os.environ.get("FORMWORK_ENGINE_TESTS", "")
MODEL = "qwen2.5-coder-0.5b"

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["a"],
}


def test_adapters_import_without_the_engines():
    code = (
        "import sys, formwork.sglang, formwork.vllm; "
        "assert 'sglang' not in sys.modules and 'vllm' not in sys.modules and 'torch' not in sys.modules; "
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def required(pkg=None):
    if REQUIRED in ("1", "all"):
        return True
    names = [n for n in REQUIRED.split(",") if n]
    return bool(names) if pkg is None else pkg in names


def need(pkg):
    if importlib.util.find_spec(pkg) is None:
        if required(pkg):
            pytest.fail(f"FORMWORK_ENGINE_TESTS=1 but {pkg} is not installed in {sys.executable}")
        pytest.skip(f"SKIPPED ({pkg} not installed; not a pass): run {RUN}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A local HF model directory: tokenizer.json from the GGUF, a Qwen2 config."""
    d = os.environ.get("FORMWORK_TOKENIZERS")
    tj = pathlib.Path(d or "/nonexistent") / f"{MODEL}.tokenizer.json"
    if not tj.exists():
        msg = (
            f"no {MODEL} tokenizer: run `cargo run --example tokenizer_json -- {MODEL} DIR` "
            f"and set FORMWORK_TOKENIZERS=DIR ({RUN} does)"
        )
        if required():
            pytest.fail(msg)
        pytest.skip("SKIPPED (not a pass): " + msg)
    meta = json.loads((tj.parent / f"{MODEL}.meta.json").read_text())
    out = tmp_path_factory.mktemp(MODEL)
    (out / "tokenizer.json").write_bytes(tj.read_bytes())
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
    }))
    # Qwen2.5-0.5B's published shape; no weights are loaded.
    (out / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": meta["vocab_size"],
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    }))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    return out


@pytest.fixture(scope="module")
def hf_tokenizer(model_dir):
    need("transformers")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def one_token(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def allowed_of(row, vocab):
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:vocab]).tolist()


# ------------------------------------------------------------------------ SGLang


@pytest.fixture(scope="module")
def sglang_installed():
    need("sglang")


@pytest.fixture(scope="module")
def sglang_backend(sglang_installed, model_dir, hf_tokenizer):
    """formwork registered, the server args parsed by SGLang's own CLI parser and
    published, and the backend made by SGLang's ``create_grammar_backend``."""
    import argparse

    from sglang.srt import runtime_context
    from sglang.srt.constrained import base_grammar_backend as base
    from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, ServerArgs

    import formwork.sglang

    formwork.sglang.register()
    assert "formwork" in GRAMMAR_BACKEND_CHOICES
    assert base.GRAMMAR_BACKEND_REGISTRY["formwork"] is formwork.sglang.create_backend

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(
        ["--model-path", str(model_dir), "--grammar-backend", "formwork", "--device", "cpu"]
    )
    assert ns.grammar_backend == "formwork"
    args = ServerArgs.from_cli_args(ns)
    runtime_context.publish(args, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0))
    assert runtime_context.get_exec().kernel.grammar_backend == "formwork"

    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    backend = base.create_grammar_backend(args, hf_tokenizer, vocab, {151645, 151643})
    _, cls = formwork.sglang.classes()
    assert isinstance(backend, cls)
    return backend, vocab


def sglang_grammar(backend, key):
    """What SGLang's GrammarManager does for a request: the cache or a compile on the
    backend's executor; the result's copy goes into the cache."""
    value, hit = backend.get_cached_or_future_value(key, False)
    if hit:
        return value, True
    g = value.result(timeout=60)
    backend.set_cache(key, g.copy())
    return g, False


def test_sglang_compile_cache_and_refusals(sglang_backend, hf_tokenizer):
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    backend, vocab = sglang_backend
    key = ("json", json.dumps(SCHEMA))
    g1, hit1 = sglang_grammar(backend, key)
    g1.accept_token(one_token(hf_tokenizer, '{"'))
    g2, hit2 = sglang_grammar(backend, key)
    assert (hit1, hit2) == (False, True)
    # The cached copy is pristine: the second request starts at the beginning.
    assert g2.matcher.state_id() != g1.matcher.state_id()
    assert g2.grammar is g1.grammar  # no recompile

    bad, _ = sglang_grammar(backend, ("json", '{"type": "string", "pattern": "(?<=a)b"}'))
    assert isinstance(bad, InvalidGrammarObject), bad
    assert "/pattern" in bad.error_message, bad.error_message
    regex, _ = sglang_grammar(backend, ("regex", "[a-z]+"))
    assert isinstance(regex, InvalidGrammarObject)
    # json_object requests ("$$ANY$$") compile as any object.
    anyobj, _ = sglang_grammar(backend, ("json", "$$ANY$$"))
    assert not isinstance(anyobj, InvalidGrammarObject)


def test_sglang_grammar_manager(sglang_backend, hf_tokenizer):
    """SGLang's GrammarManager, the scheduler's grammar queue, on real Req objects: the
    manager makes the backend through create_grammar_backend, compiles on the backend's
    executor, hands a ready grammar to the request and aborts the request whose schema
    formwork refuses, with formwork's message (keyword and JSON Pointer). The scheduler
    itself is a stand-in with the attributes the manager reads (one rank, no pipeline)."""
    from array import array
    from types import SimpleNamespace

    from sglang.srt.constrained.grammar_manager import GrammarManager
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.runtime_context import get_server_args

    import formwork.sglang

    _, vocab = sglang_backend
    group = SimpleNamespace(world_size=1, first_rank=0, is_first_rank=True)
    scheduler = SimpleNamespace(
        server_args=get_server_args(),
        tokenizer=hf_tokenizer,
        model_config=SimpleNamespace(
            vocab_size=vocab, hf_eos_token_id={151645, 151643}, think_end_ids=None
        ),
        dp_tp_cpu_group=None,
        dp_tp_group=group,
        pp_group=None,
    )
    gm = GrammarManager(scheduler)
    grammar_cls, backend_cls = formwork.sglang.classes()
    assert isinstance(gm.grammar_backend, backend_cls)
    schemas = [json.dumps(SCHEMA), '{"type": "string", "pattern": "(?<=a)b"}']
    reqs = [
        Req(f"r{i}", "", array("i", [1, 2, 3]), SamplingParams(json_schema=s, max_new_tokens=16))
        for i, s in enumerate(schemas)
    ]
    assert all(gm.process_req_with_grammar(r) for r in reqs)
    ready = []
    deadline = time.time() + 60
    while len(ready) < len(reqs):
        assert time.time() < deadline, "grammars not ready"
        ready += gm.get_ready_grammar_requests()
    ok, bad = reqs
    assert isinstance(ok.grammar, grammar_cls) and not ok.finished()
    assert ok.to_finish is None
    assert bad.to_finish is not None
    assert "/pattern" in bad.to_finish.message and "formwork" in bad.to_finish.message
    # A second request with the same schema is a cache hit: a fresh copy, no queue.
    again = Req("r2", "", array("i", [1]), SamplingParams(json_schema=schemas[0], max_new_tokens=16))
    assert gm.process_req_with_grammar(again) is False
    assert isinstance(again.grammar, grammar_cls) and again.grammar.grammar is ok.grammar.grammar


def make_sampling_batch_info(grammars, vocab):
    """A real SamplingBatchInfo for a CPU batch (greedy rows) with these grammars."""
    import dataclasses

    import torch
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    n = len(grammars)
    given = {
        "temperatures": torch.ones((n, 1)),
        "top_ps": torch.ones(n),
        "top_ks": torch.full((n,), -1, dtype=torch.int32),
        "min_ps": torch.zeros(n),
        "is_all_greedy": True,
        "is_any_greedy": True,
        "need_top_p_sampling": False,
        "need_top_k_sampling": False,
        "need_min_p_sampling": False,
        "vocab_size": vocab,
        "grammars": grammars,
        "device": "cpu",
    }
    required = [
        f.name for f in dataclasses.fields(SamplingBatchInfo)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [f for f in required if f not in given]
    assert not missing, f"SamplingBatchInfo wants more fields: {missing}"
    return SamplingBatchInfo(**{k: v for k, v in given.items()})


def test_sglang_batched_vocab_mask(sglang_backend, hf_tokenizer):
    """SGLang's own batch path: SamplingBatchInfo.update_regex_vocab_mask (allocate,
    fill_vocab_mask_batched, move) then apply_logits_bias (the grammar's
    apply_vocab_mask). Rows without a grammar, finished or terminated stay open."""
    import torch

    backend, vocab = sglang_backend
    key = ("json", json.dumps(SCHEMA))
    tok = hf_tokenizer
    prefixes = ['{"', '{"a":"', '{"a":"x","n":1', '{"a":"hi"}', "", '{"a":"y","']
    grammars = []
    for p in prefixes:
        g, _ = sglang_grammar(backend, key)
        for t in tok.encode(p, add_special_tokens=False):
            g.accept_token(t)
        grammars.append(g)
    done, _ = sglang_grammar(backend, key)
    for t in tok.encode('{"a":""}', add_special_tokens=False):
        done.accept_token(t)
    done.accept_token(151645)  # EOS: terminated, SGLang leaves the row open
    assert done.is_terminated()
    finished, _ = sglang_grammar(backend, key)
    finished.finished = True  # the scheduler's flag (req.finished())
    batch = grammars[:2] + [None] + grammars[2:] + [done, finished]

    from sglang.srt.constrained.base_grammar_backend import BaseGrammarObject

    # The batch goes to formwork's fill_masks, not SGLang's row-by-row default.
    assert type(grammars[0]).fill_vocab_mask_batched is not BaseGrammarObject.fill_vocab_mask_batched
    info = make_sampling_batch_info(batch, vocab)
    info.update_regex_vocab_mask()
    mask = info.grammar_mask.vocab_mask
    assert mask.dtype == torch.int32 and tuple(mask.shape) == (len(batch), (vocab + 31) // 32)
    logits = torch.randn(len(batch), vocab)
    info.apply_logits_bias(logits)
    for i, g in enumerate(batch):
        finite = torch.isfinite(logits[i]).nonzero().flatten().tolist()
        if g is None or g.finished or g.is_terminated():
            assert finite == list(range(vocab)), i
        else:
            assert finite == g.matcher.allowed_tokens(), i
            assert finite == allowed_of(mask[i].numpy(), vocab), i
    # EOS (both ids) exactly on the complete instance's row.
    r = batch.index(grammars[3])
    assert torch.isfinite(logits[r, 151645]) and torch.isfinite(logits[r, 151643])
    assert not torch.isfinite(logits[0, 151645])
    # Padding ids past the tokenizer are never allowed on a constrained row.
    assert not torch.isfinite(logits[0, len(tok):]).any() or len(tok) == vocab


def test_sglang_decode_loop(sglang_backend, hf_tokenizer):
    """Greedy decoding of random logits through SGLang's mask path, token by token,
    until EOS: the text is a valid instance; a refused token raises ValueError and
    changes nothing; rollback over the EOS reopens the grammar."""
    import torch

    backend, vocab = sglang_backend
    g, _ = sglang_grammar(backend, ("json", json.dumps(SCHEMA)))
    gen = torch.Generator().manual_seed(5)
    out = []
    for _ in range(60):
        info = make_sampling_batch_info([g], vocab)
        info.update_regex_vocab_mask()
        logits = torch.randn(1, vocab, generator=gen)
        logits[0, 151645] += 3.0  # lean to finish
        info.apply_logits_bias(logits)
        t = int(torch.argmax(logits[0]))
        g.accept_token(t)
        if g.is_terminated():
            break
        out.append(t)
    assert g.is_terminated(), hf_tokenizer.decode(out)
    value = json.loads(hf_tokenizer.decode(out))
    assert isinstance(value, dict) and isinstance(value["a"], str)
    g.rollback(1)
    assert not g.is_terminated() and g.matcher.is_accepting()
    before = g.matcher.state_id()
    with pytest.raises(ValueError):
        g.accept_token(one_token(hf_tokenizer, "z"))
    assert g.matcher.state_id() == before


# -------------------------------------------------------------------------- vLLM

NUM_SPEC = 8


@pytest.fixture(scope="module")
def vllm_installed():
    need("vllm")


@pytest.fixture(scope="module")
def vllm_manager_factory(vllm_installed, model_dir):
    from vllm.config import DeviceConfig, SchedulerConfig, StructuredOutputsConfig, VllmConfig
    from vllm.config.model import ModelConfig
    from vllm.config.speculative import SpeculativeConfig
    from vllm.v1.structured_output import StructuredOutputManager

    from formwork.vllm import FormworkBackend

    def make(num_spec=NUM_SPEC, max_num_seqs=None, backend="formwork"):
        kw = {}
        if num_spec:
            kw["speculative_config"] = SpeculativeConfig(
                model="[ngram]", num_speculative_tokens=num_spec
            )
        if max_num_seqs:
            kw["scheduler_config"] = SchedulerConfig(
                max_num_seqs=max_num_seqs, max_model_len=32768, is_encoder_decoder=False
            )
        cfg = VllmConfig(
            model_config=ModelConfig(model=str(model_dir), tokenizer=str(model_dir)),
            device_config=DeviceConfig(device="cpu"),
            structured_outputs_config=StructuredOutputsConfig(
                backend="xgrammar", disable_any_whitespace=True
            ),
            **kw,
        )
        manager = StructuredOutputManager(cfg)
        if backend == "formwork":
            # Assigned before grammar_init; vLLM has no "formwork" name to select.
            manager.backend = FormworkBackend(
                cfg, tokenizer=manager.tokenizer, vocab_size=cfg.model_config.get_vocab_size()
            )
        return manager, cfg

    return make


def vllm_request(manager, rid, schema=SCHEMA, prefix_ids=(), backend="formwork"):
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request

    sp = SamplingParams(structured_outputs=StructuredOutputsParams(json=json.dumps(schema)))
    sp.structured_outputs._backend = backend
    sp.update_from_generation_config({}, 151645)
    req = Request(
        request_id=rid, prompt_token_ids=[1, 2, 3], sampling_params=sp, pooling_params=None
    )
    manager.grammar_init(req)
    sreq = req.structured_output_request
    deadline = time.time() + 60
    while not sreq._check_grammar_completion():
        assert time.time() < deadline, "grammar compile timed out"
        time.sleep(0.01)
    g = sreq.grammar
    if prefix_ids and not isinstance(g, Exception):
        assert g.accept_tokens(rid, list(prefix_ids))
    return req


def row_pattern(bitmask):
    return "".join("U" if (row == -1).all() else "C" for row in bitmask)


def run_flow(manager, req, raw):
    """vLLM's manager test flow: validate the drafts, the speculative bitmask (one row
    a position, then the bonus row; the state rolled back after), accept the validated
    tokens, the post-accept bitmask. Returns what each step gave."""
    rid = req.request_id
    validated = manager.validate_tokens(req, list(raw))
    padded = validated + [-1] * (len(raw) - len(validated))
    # A copy: the array is a view of the manager's buffer, which the next call refills.
    bm = manager.grammar_bitmask({rid: req}, [rid], {rid: padded}).copy()
    again = manager.validate_tokens(req, list(raw))
    g = req.structured_output_request.grammar
    terminated_before = g.is_terminated()
    req.append_output_token_ids(list(validated))
    accepted = manager.accept_tokens(req, list(validated))
    post = manager.grammar_bitmask({rid: req}, [rid], {})
    return {
        "validated": validated,
        "pattern": row_pattern(bm),
        "validated_again": again,
        "terminated_before_accept": terminated_before,
        "accepted": accepted,
        "post_row_is_row_at_validated": bool((post[0] == bm[len(validated)]).all()),
        "terminated": g.is_terminated(),
        "bitmask": bm,
    }


# (prefix, drafts, validated, row pattern, terminated): vLLM's own manager-test cases
# for formwork's compact JSON and the Qwen tokenizer. Patterns are vLLM 0.33.0's: a row
# per speculative position (8) plus the bonus row; after a -1 (a refused draft) vLLM
# leaves the rows open, and after EOS too. vLLM's xgrammar backend gives the same.
FLOWS = [
    ('{"a"', (":", '"', "b", '"}'), None, "CCCCCUUUU", False),
    ('{"a"', ("z", ":", '"', "b"), (), "CUUUUUUUU", False),
    ('{"a"', (":", "z", '"', "b"), (":",), "CCUUUUUUU", False),
    ('{"a":"b"}', ("EOS", " ", " "), ("EOS",), "CUUUUUUUU", True),
    ('{"a"', (":", '"', "b", '"}', "EOS", " "), (":", '"', "b", '"}', "EOS"), "CCCCCUUUU", True),
]


@pytest.mark.parametrize("flow", FLOWS, ids=lambda f: f"{f[0]}|{'.'.join(f[1])}")
def test_vllm_structured_output_manager_flow(vllm_manager_factory, hf_tokenizer, flow):
    """The flow through StructuredOutputManager with formwork's backend, and the same
    flow with vLLM's default backend (xgrammar, compact JSON) beside it: same
    validated prefix, same rows constrained, same termination. Every constrained row
    of formwork's bitmask is the matcher's own set after that many tokens."""
    prefix, drafts, validated, pattern, terminated = flow
    tok = hf_tokenizer
    ids = lambda texts: [151645 if t == "EOS" else one_token(tok, t) for t in texts]
    raw = ids(drafts)
    want = raw if validated is None else ids(validated)
    got = {}
    for backend in ("formwork", "xgrammar"):
        manager, cfg = vllm_manager_factory(backend=backend)
        req = vllm_request(
            manager, "flow", prefix_ids=tok.encode(prefix, add_special_tokens=False),
            backend=backend,
        )
        got[backend] = run_flow(manager, req, raw)
        if backend == "formwork":
            g = req.structured_output_request.grammar
    fw = got["formwork"]
    assert fw["validated"] == want
    assert fw["validated_again"] == want  # grammar_bitmask rolled its advance back
    assert fw["pattern"] == pattern
    assert fw["terminated_before_accept"] is False
    assert fw["accepted"] is True
    assert fw["post_row_is_row_at_validated"]
    assert fw["terminated"] is terminated
    xg = got["xgrammar"]
    for k in ("validated", "pattern", "accepted", "terminated"):
        assert xg[k] == fw[k], (k, xg[k], fw[k])
    vocab = cfg.model_config.get_vocab_size()
    for i, c in enumerate(pattern):
        if c == "C" and i <= len(want) and (i == 0 or want[i - 1] != 151645):
            probe = formwork_probe(g, tok, prefix, want[:i])
            assert allowed_of(fw["bitmask"][i], vocab) == probe, i


def formwork_probe(g, tok, prefix, tokens):
    """The allowed set after `prefix` then `tokens`, from a fresh matcher."""
    m = g.matcher.fork()
    m.reset()
    m.commit_tokens(tok.encode(prefix, add_special_tokens=False) + list(tokens))
    return m.allowed_tokens()


def test_vllm_refusals(vllm_manager_factory, hf_tokenizer):
    manager, _ = vllm_manager_factory()
    req = vllm_request(manager, "bad", schema={"type": "string", "pattern": "(?<=a)b"})
    err = req.structured_output_request.grammar
    assert isinstance(err, formwork.CompileError), err
    assert err.pointer == "/pattern"
    ok = vllm_request(manager, "ok")
    g = ok.structured_output_request.grammar
    before = g.matcher.state_id()
    assert manager.accept_tokens(ok, [one_token(hf_tokenizer, "z")]) is False
    assert g.matcher.state_id() == before
    # EOS before the instance is complete: refused, and the grammar is not over.
    assert manager.accept_tokens(ok, [151645]) is False
    assert g.is_terminated() is False and g.matcher.state_id() == before


def test_vllm_parallel_fill_over_128_requests(vllm_manager_factory, hf_tokenizer):
    """Above 128 requests (no speculation) vLLM fills the bitmask from its own thread
    pool, in batches of 16; every row must equal the matcher's own set."""
    manager, cfg = vllm_manager_factory(num_spec=0, max_num_seqs=256)
    assert manager.fill_bitmask_parallel_threshold < 200
    tok = hf_tokenizer
    texts = ['{"', '{"a":"', '{"a":"x', '{"a":"x","n":', '{"a":"x","n":12', '']
    reqs = {}
    for i in range(200):
        p = texts[i % len(texts)]
        reqs[f"r{i}"] = vllm_request(manager, f"r{i}", prefix_ids=tok.encode(p, add_special_tokens=False))
    ids = list(reqs)
    bm = manager.grammar_bitmask(reqs, ids, {})
    vocab = cfg.model_config.get_vocab_size()
    assert bm.shape == (200, (vocab + 31) // 32)
    rows, sets = set(), set()
    for i, rid in enumerate(ids):
        g = reqs[rid].structured_output_request.grammar
        allowed = g.matcher.allowed_tokens()
        assert allowed_of(bm[i], vocab) == allowed, rid
        rows.add(bm[i].tobytes())
        sets.add(tuple(allowed))
    assert len(rows) == len(sets) >= 4
