"""Rollback, validate, fork and reset; errors carry their keyword and pointer."""

import pytest

import formwork
from conftest import byte_vocab

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "n"],
}


@pytest.fixture
def setup():
    toks, eos, n = byte_vocab(extra=['{"name":"', '","n":', "ab", "}"])
    tok = formwork.Tokenizer.from_token_bytes(toks, eos_ids=[eos], vocab_size=n)
    return tok, eos, formwork.Compiler(tok).json_schema(SCHEMA)


def ids(s):
    return list(s.encode())


def snapshot(m):
    return (m.state_id(), tuple(m.allowed_tokens()), m.is_accepting(), m.is_terminated())


def test_rollback_restores_the_state(setup):
    tok, eos, g = setup
    m = g.matcher()
    m.commit_tokens([256, 258])  # {"name":"ab
    before = snapshot(m)
    seq = ids("c") + [257] + ids("42") + [259]
    m.commit_tokens(seq)
    assert m.is_accepting()
    m.commit_tokens([eos])
    assert m.is_terminated()
    assert m.rollback(len(seq) + 1) == len(seq) + 1
    assert snapshot(m) == before
    # Step by step, each rollback returns the earlier state exactly.
    states = [snapshot(m)]
    for t in seq:
        m.commit_tokens([t])
        states.append(snapshot(m))
    for k in range(len(seq), 0, -1):
        assert m.rollback(1) == 1
        assert snapshot(m) == states[k - 1]
    assert m.rollback(10) == 2, "only what was committed"
    assert snapshot(m) == snapshot(g.matcher())


def test_validate_changes_nothing(setup):
    tok, eos, g = setup
    m = g.matcher()
    m.commit_tokens([256])
    before = snapshot(m)
    good = ids("abc") + [257] + ids("7") + [259, eos]
    assert m.validate_tokens(good) == len(good)
    assert snapshot(m) == before
    assert m.validate_tokens(ids("abc") + [257] + ids("7x")) == 5
    assert m.validate_tokens(ids("123456789")) == 8, "maxLength 8"
    assert m.validate_tokens([eos]) == 0
    assert snapshot(m) == before


def test_refused_commit_is_atomic(setup):
    tok, eos, g = setup
    m = g.matcher()
    before = snapshot(m)
    with pytest.raises(formwork.TokenError) as e:
        m.commit_tokens([256, 258, eos])
    assert (e.value.index, e.value.token) == (2, eos)
    assert "not a complete instance" in e.value.why
    assert snapshot(m) == before
    with pytest.raises(formwork.TokenError) as e:
        m.commit_tokens([tok.vocab_size + 5])
    assert e.value.index == 0 and "outside the vocabulary" in str(e.value)


def test_fork_and_reset(setup):
    tok, eos, g = setup
    m = g.matcher()
    m.commit_tokens([256])
    f = m.fork()
    f.commit_tokens(ids("x"))
    assert snapshot(f) != snapshot(m)
    m.commit_tokens(ids("x"))
    assert snapshot(f) == snapshot(m)
    m.reset()
    assert snapshot(m) == snapshot(g.matcher())
    assert f.rollback(5) == 2, "a fork keeps the history"


def test_forced_tokens(setup):
    tok, eos, g = setup
    m = g.matcher()
    assert m.forced_bytes() == b'{"name":"'
    ff = m.forced_tokens()
    assert ff == [256], "one token spells the forced bytes"
    m.commit_tokens(ff)
    assert m.forced_bytes() == b""


def test_budget_steers_to_a_complete_instance(setup):
    tok, eos, g = setup
    m = g.matcher(budget=6)
    for _ in range(6):
        allowed = m.allowed_tokens()
        assert allowed, "never cut off"
        # The longest-spelled allowed token is as hostile as a model gets: it writes.
        m.commit_tokens([max(allowed, key=lambda t: (t != eos, len(tok.token_bytes(t)), t))])
        if m.is_accepting():
            break
    assert m.is_accepting()


def test_step_limit_is_an_error_with_its_numbers(setup):
    tok, _, _ = setup
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "pattern": f"^[a-z]{{1,6}}(?:{i}|-{i})+$"} for i in range(40)},
    }
    # A count of work, not a clock: the same error, with the same numbers, every time.
    errs = []
    for _ in range(2):
        with pytest.raises(formwork.CompileError) as e:
            formwork.Compiler(tok, step_limit=1000).json_schema(schema)
        errs.append(str(e.value))
        assert e.value.kind == "limit"
        assert e.value.pointer.startswith("/properties/p")
    assert errs[0] == errs[1]
    assert errs[0].startswith("compile step limit of 1000 reached after ") and "\n" not in errs[0]
    formwork.Compiler(tok).json_schema(schema)
    with pytest.raises(TypeError, match="step_limit"):
        formwork.Compiler(tok, time_limit_ms=5000)


def test_compile_error_carries_keyword_and_pointer(setup):
    tok, _, _ = setup
    c = formwork.Compiler(tok)
    with pytest.raises(formwork.CompileError) as e:
        c.json_schema({"type": "object", "properties": {"a/b": {"type": "string", "pattern": "^(?<=a)b$"}}})
    assert e.value.kind == "unsupported"
    assert e.value.keyword == "pattern"
    assert e.value.pointer == "/properties/a~1b/pattern"
    assert "/properties/a~1b/pattern" in str(e.value)
    with pytest.raises(formwork.CompileError) as e:
        c.json_schema("{not json")
    assert e.value.kind == "invalid_json" and e.value.pointer is None
    # Cached, errors included; a reordered schema is another entry (order is output order).
    c.json_schema(SCHEMA)
    c.json_schema(SCHEMA)
    n = c.cache_len()
    c.json_schema(dict(reversed(list(SCHEMA.items()))))
    assert c.cache_len() == n + 1
    lenient = formwork.Compiler(tok, lenient=True)
    g = lenient.json_schema({"type": "string", "pattern": "^(?<=a)b$"})
    assert [r[:2] for r in g.relaxed] == [("pattern", "/pattern")]
