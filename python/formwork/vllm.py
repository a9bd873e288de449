"""formwork as a vLLM structured-output backend (``vllm.v1.structured_output``).

vLLM picks its backends by name in its own code, so selecting formwork from the command
line needs an upstream change (a ``"formwork"`` choice in
``vllm/config/structured_outputs.py`` and a branch in ``StructuredOutputManager``; see
python/README.md). Until then the backend is assigned to the manager directly:

    from formwork.vllm import FormworkBackend
    manager = StructuredOutputManager(vllm_config)
    manager.backend = FormworkBackend(vllm_config, tokenizer=tok, vocab_size=vocab)

Semantics follow vLLM's llguidance backend: EOS among accepted tokens terminates the
request, and a rollback over the EOS (speculative decoding) reopens it; validate_tokens
changes nothing; JSON Schema and ``json_object`` only (other request types raise
ValueError, which vLLM reports for that request). vLLM is imported only when the
classes are first used.
"""

from dataclasses import dataclass, field

from . import Compiler, TokenError, tokenizer_from_transformers
from . import _torch_mask

_classes = None


def _build_classes():
    from vllm.v1.structured_output.backend_types import (
        StructuredOutputBackend,
        StructuredOutputGrammar,
        StructuredOutputOptions,
    )

    @dataclass
    class FormworkGrammar(StructuredOutputGrammar):
        matcher: object
        eos_ids: frozenset
        terminated: bool = False
        rollback_lag: int = 0

        def accept_tokens(self, request_id: str, tokens: list) -> bool:
            if any(t in self.eos_ids for t in tokens):
                if self.matcher.is_terminated() and not self.terminated:
                    self.rollback_lag = 1
                self.terminated = True
            if self.matcher.is_terminated():
                return True
            try:
                self.matcher.commit_tokens(tokens)
            except TokenError:
                return False
            return True

        def validate_tokens(self, tokens: list) -> list:
            # Speculative padding (-1) at the end is not a token.
            while tokens and tokens[-1] < 0:
                tokens = tokens[:-1]
            if not tokens or self.matcher.is_terminated():
                return []
            return tokens[: self.matcher.validate_tokens(tokens)]

        def rollback(self, num_tokens: int) -> None:
            if num_tokens > 0:
                self.matcher.rollback(num_tokens - self.rollback_lag)
                self.terminated = False
                self.rollback_lag = 0

        def fill_bitmask(self, bitmask, idx: int) -> None:
            self.matcher.fill_mask(bitmask, idx)

        def is_terminated(self) -> bool:
            return self.terminated

        def reset(self):
            self.matcher.reset()
            self.terminated = False
            self.rollback_lag = 0

        def find_jump_string(self):
            forced = self.matcher.forced_bytes()
            try:
                return forced.decode("utf-8") or None
            except UnicodeDecodeError:
                return None

    @dataclass
    class FormworkBackend(StructuredOutputBackend):
        compiler: object = field(default=None, init=False)

        def __post_init__(self):
            self.fw_tokenizer = tokenizer_from_transformers(self.tokenizer, self.vocab_size)
            self.compiler = Compiler(self.fw_tokenizer)

        def compile_grammar(self, request_type, grammar_spec, stop_token_ids=None):
            if request_type == StructuredOutputOptions.JSON:
                grammar = self.compiler.json_schema(grammar_spec)
            elif request_type == StructuredOutputOptions.JSON_OBJECT:
                grammar = self.compiler.json_schema('{"type": "object"}')
            else:
                raise ValueError(
                    f"formwork enforces JSON Schema only, not {request_type.name}"
                )
            return FormworkGrammar(
                matcher=grammar.matcher(),
                eos_ids=frozenset(self.fw_tokenizer.eos_ids),
            )

        def allocate_token_bitmask(self, max_num_seqs: int):
            return _torch_mask.allocate(max_num_seqs, self.fw_tokenizer.vocab_size)

        def destroy(self):
            pass

    return FormworkGrammar, FormworkBackend


def classes():
    """``(FormworkGrammar, FormworkBackend)``, built on vLLM's base classes."""
    global _classes
    if _classes is None:
        _classes = _build_classes()
    return _classes


def __getattr__(name):
    if name in ("FormworkGrammar", "FormworkBackend"):
        grammar, backend = classes()
        return grammar if name == "FormworkGrammar" else backend
    raise AttributeError(name)
