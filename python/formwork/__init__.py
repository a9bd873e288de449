"""formwork: JSON Schema token masks for Python serving engines.

Build once, keep a small state per sequence::

    tok = formwork.Tokenizer.from_hf("tokenizer.json", eos_ids=[2], vocab_size=151936)
    compiler = formwork.Compiler(tok)                # thread-safe, caches by schema text
    grammar = compiler.json_schema({"type": "object", ...})   # raises CompileError
    m = grammar.matcher()                            # one per sequence
    bitmask = formwork.allocate_bitmask(batch, tok.vocab_size)
    formwork.fill_masks([(m, 0)], bitmask)           # parallel, GIL released
    m.commit_tokens([sampled])                       # raises TokenError; m unchanged

Bitmask layout (SGLang's and vLLM's): one bit per token id, ``ceil(vocab_size / 32)``
int32 words per row, token ``t`` at bit ``t % 32`` of word ``t // 32``; a set bit allows
the token. The engine adapters are ``formwork.sglang`` and ``formwork.vllm``; neither
engine is imported until an adapter is used.
"""

from ._formwork import (
    CompileError,
    Compiler,
    Grammar,
    Matcher,
    TokenError,
    Tokenizer,
    fill_masks,
    num_threads,
)

__all__ = [
    "CompileError",
    "Compiler",
    "Grammar",
    "Matcher",
    "TokenError",
    "Tokenizer",
    "allocate_bitmask",
    "apply_bitmask",
    "fill_masks",
    "num_threads",
    "tokenizer_from_transformers",
]


def allocate_bitmask(batch_size: int, vocab_size: int):
    """A numpy int32 bitmask of ``batch_size`` rows, every token allowed."""
    import numpy as np

    return np.full((batch_size, (vocab_size + 31) // 32), -1, dtype=np.int32)


def apply_bitmask(logits, bitmask) -> None:
    """Sets ``-inf`` (numpy, in place) on the logits of every refused token. ``logits``:
    ``(vocab,)`` or ``(batch, vocab)`` float; ``bitmask``: the matching int32 rows.
    Logits past the bitmask's width are refused too."""
    import numpy as np

    lg = logits if logits.ndim == 2 else logits[None, :]
    bm = bitmask if bitmask.ndim == 2 else bitmask[None, :]
    vocab = lg.shape[1]
    bits = np.unpackbits(bm.astype("<i4").view(np.uint8), axis=1, bitorder="little")
    allowed = np.zeros((bm.shape[0], vocab), dtype=bool)
    n = min(vocab, bits.shape[1])
    allowed[:, :n] = bits[:, :n].astype(bool)
    lg[~allowed[: lg.shape[0]]] = -np.inf


def tokenizer_from_transformers(tokenizer, vocab_size=None, eos_ids=None) -> Tokenizer:
    """A ``Tokenizer`` from a Hugging Face *fast* tokenizer (``transformers``), the way
    the engines hold theirs: its ``tokenizer.json``, its special ids, its EOS id (or
    ``eos_ids``), and ``vocab_size`` the model's (padding ids included)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError(
            "formwork needs a fast (Rust) Hugging Face tokenizer with backend_tokenizer"
        )
    if eos_ids is None:
        eos = getattr(tokenizer, "eos_token_id", None)
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    special = [i for i in getattr(tokenizer, "all_special_ids", []) if i not in eos_ids]
    n = max(vocab_size or 0, len(tokenizer))
    return Tokenizer.from_hf(
        backend.to_str(), eos_ids=list(eos_ids), vocab_size=n, special_ids=special
    )
