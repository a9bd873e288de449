"""The bitmask layout: one bit per token, ceil(vocab/32) int32 words, lowest bit first;
applied to logits with numpy it gives -inf on exactly the refused tokens, EOS and
padding ids included."""

import numpy as np
import pytest

import formwork
from conftest import byte_vocab

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def make(pad=37):
    toks, eos, n = byte_vocab(extra=['{"ok":', "true", "false", "}"], pad=pad)
    tok = formwork.Tokenizer.from_token_bytes(toks, eos_ids=[eos], vocab_size=n)
    return tok, eos, formwork.Compiler(tok).json_schema(SCHEMA)


def unpack(row, vocab):
    bits = np.unpackbits(row.astype("<i4").view(np.uint8), bitorder="little")
    return bits[:vocab].astype(bool), bits[vocab:]


def test_width_and_padding():
    tok, eos, g = make(pad=37)
    assert tok.vocab_size == 261 + 37
    assert tok.mask_words == (261 + 37 + 31) // 32
    bm = formwork.allocate_bitmask(2, tok.vocab_size)
    m = g.matcher()
    m.fill_mask(bm, 1)
    allowed, tail = unpack(bm[1], tok.vocab_size)
    assert not tail.any(), "bits past the vocabulary are 0"
    assert set(np.flatnonzero(allowed)) == set(m.allowed_tokens()) == {ord("{"), 256}
    assert not allowed[eos] and not allowed[262:].any()
    assert (bm[0] == -1).all(), "other rows untouched"


def test_logits_minus_inf_exactly_on_refused():
    tok, eos, g = make()
    m = g.matcher()
    text_ids = [256, 257, 259]  # {"ok": true }
    for step in range(len(text_ids) + 1):
        bm = formwork.allocate_bitmask(1, tok.vocab_size)
        m.fill_mask(bm, 0)
        logits = np.random.default_rng(step).standard_normal((1, tok.vocab_size)).astype(np.float32)
        before = logits.copy()
        formwork.apply_bitmask(logits, bm)
        allowed = set(m.allowed_tokens())
        refused = np.isneginf(logits[0])
        assert set(np.flatnonzero(~refused)) == allowed
        assert (logits[0][~refused] == before[0][~refused]).all()
        assert refused[262:].all(), "padding ids are refused"
        if step < len(text_ids):
            assert refused[eos], "EOS refused before the instance is complete"
            m.commit_tokens([text_ids[step]])
    assert m.is_accepting() and m.is_finished()
    assert np.flatnonzero(~refused).tolist() == [eos], "complete: only EOS"
    m.commit_tokens([eos])
    assert m.is_terminated()
    bm = formwork.allocate_bitmask(1, tok.vocab_size)
    m.fill_mask(bm, 0)
    allowed, _ = unpack(bm[0], tok.vocab_size)
    assert np.flatnonzero(allowed).tolist() == [eos], "after EOS the row allows EOS alone (as llguidance's)"
    with pytest.raises(formwork.TokenError, match="after EOS"):
        m.commit_tokens([ord("x")])


def test_targets_are_checked():
    tok, _, g = make()
    m = g.matcher()
    with pytest.raises(ValueError, match="words per row"):
        m.fill_mask(np.zeros((1, tok.mask_words + 1), dtype=np.int32))
    with pytest.raises(TypeError, match="int32"):
        m.fill_mask(np.zeros((1, tok.mask_words), dtype=np.int64))
    with pytest.raises(ValueError, match="contiguous"):
        m.fill_mask(np.zeros((tok.mask_words, 2), dtype=np.int32).T)
    with pytest.raises(ValueError, match="outside"):
        m.fill_mask(np.zeros((2, tok.mask_words), dtype=np.int32), 2)
    with pytest.raises(ValueError, match="twice"):
        formwork.fill_masks([(m, 0), (g.matcher(), 0)], np.zeros((2, tok.mask_words), dtype=np.int32))
    ro = np.zeros((1, tok.mask_words), dtype=np.int32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        m.fill_mask(ro)


def test_bad_vocabularies():
    with pytest.raises(ValueError, match="EOS"):
        formwork.Tokenizer.from_token_bytes([b"a"], eos_ids=[])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        formwork.Tokenizer.from_token_bytes([b"a"], eos_ids=[5])
    with pytest.raises(ValueError, match="smaller"):
        formwork.Tokenizer.from_token_bytes([b"a", b""], eos_ids=[1], vocab_size=1)
    with pytest.raises(ValueError, match="not JSON"):
        formwork.Tokenizer.from_hf("{nope", eos_ids=[0])
