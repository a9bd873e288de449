"""Shared fixtures. The HF tokenizer files come from the GGUF of a registry model
(`cargo run --example tokenizer_json -- smollm2-135m DIR`, done by scripts/test), named by
FORMWORK_TOKENIZERS=DIR; JSONSchemaBench is ../shared/data/jsonschemabench, or
FORMWORK_SHARED=/path/to/shared."""

import json
import os
import pathlib

import pytest

import formwork

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tokenizer_files(name):
    d = os.environ.get("FORMWORK_TOKENIZERS")
    if not d:
        pytest.skip(
            "SKIPPED: no HF tokenizer; run `cargo run --example tokenizer_json -- "
            f"{name} DIR` and set FORMWORK_TOKENIZERS=DIR (scripts/test does)"
        )
    tj = pathlib.Path(d) / f"{name}.tokenizer.json"
    meta = pathlib.Path(d) / f"{name}.meta.json"
    if not tj.exists():
        pytest.skip(f"SKIPPED: {tj} is missing (cargo run --example tokenizer_json -- {name} {d})")
    return tj, json.loads(meta.read_text())


def shared_dir():
    env = os.environ.get("FORMWORK_SHARED")
    d = pathlib.Path(env) if env else ROOT.parent / "shared"
    bench = d / "data" / "jsonschemabench"
    if not bench.is_dir():
        pytest.skip(f"SKIPPED: {bench} is missing; set FORMWORK_SHARED=/path/to/shared")
    return bench


@pytest.fixture(scope="session")
def smollm_files():
    return tokenizer_files("smollm2-135m")


@pytest.fixture(scope="session")
def smollm(smollm_files):
    tj, meta = smollm_files
    return formwork.Tokenizer.from_hf(str(tj), eos_ids=meta["eos_ids"], vocab_size=meta["vocab_size"])


def byte_vocab(extra=(), pad=0):
    """A small vocabulary: the 256 single bytes, then `extra` multi-byte tokens, then
    EOS, then `pad` padding ids without text."""
    toks = [bytes([b]) for b in range(256)] + [e.encode() for e in extra]
    eos = len(toks)
    toks.append(b"")
    return toks, eos, len(toks) + pad
