"""formwork as a vLLM structured-output backend (``vllm.v1.structured_output``).

vLLM picks its backends by name in its own code, so selecting formwork from the command
line needs an upstream change (a ``"formwork"`` choice in
``vllm/config/structured_outputs.py`` and a branch in ``StructuredOutputManager``; see
python/README.md). Until then the backend is assigned to the manager directly:

    from formwork.vllm import FormworkBackend
    manager = StructuredOutputManager(vllm_config)
    manager.backend = FormworkBackend(vllm_config, tokenizer=tok, vocab_size=vocab)

The manager also needs the request's ``structured_outputs._backend`` set (to any name,
e.g. ``"formwork"``), as vLLM's processor does when it validates the request.

Semantics (checked against vLLM 0.33.0's manager, python/tests/test_engines.py): an EOS
among accepted tokens terminates the grammar and later tokens are ignored, as with
xgrammar; a refused token makes ``accept_tokens`` return False with the matcher
unchanged; a rollback over the EOS (speculative decoding) reopens the grammar;
``validate_tokens`` changes nothing and stops at the first padding id (-1). JSON
Schema and ``json_object`` only (other request types raise ValueError, which vLLM
reports for that request); formwork's compact whitespace, whatever
``disable_any_whitespace`` says. The request's extra ``stop_token_ids`` are not
allowed by the grammar (as with llguidance): the tokenizer's EOS ends the text. vLLM
is imported only when the classes are first used.
"""

from dataclasses import dataclass, field

from . import Compiler, TokenError, tokenizer_from_transformers
from . import _torch_mask

_classes = None


def strip_padding(tokens):
    """Speculative padding (-1) ends the tokens, as vLLM's
    ``strip_speculative_padding``: everything from the first negative id is dropped."""
    for i, t in enumerate(tokens):
        if t < 0:
            return tokens[:i]
    return tokens


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

        def accept_tokens(self, request_id: str, tokens: list) -> bool:
            # As vLLM's xgrammar grammar: tokens after the end are ignored (also
            # those after an EOS in this list); a refused token returns False and
            # leaves the matcher as it was (the scheduler then ends the request).
            if self.matcher.is_terminated():
                return True
            for i, t in enumerate(tokens):
                if t in self.eos_ids:
                    tokens = tokens[: i + 1]
                    break
            try:
                self.matcher.commit_tokens(list(tokens))
            except TokenError:
                return False
            return True

        def validate_tokens(self, tokens: list) -> list:
            tokens = strip_padding(tokens)
            if not tokens or self.matcher.is_terminated():
                return []
            return tokens[: self.matcher.validate_tokens(tokens)]

        def rollback(self, num_tokens: int) -> None:
            # An EOS is committed like any other token, so rolling back over it
            # reopens the grammar without the lag llguidance needs.
            if num_tokens > 0:
                self.matcher.rollback(num_tokens)

        def fill_bitmask(self, bitmask, idx: int) -> None:
            self.matcher.fill_mask(bitmask, idx)

        def is_terminated(self) -> bool:
            return self.matcher.is_terminated()

        def reset(self):
            self.matcher.reset()

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
                matcher=grammar.matcher(), eos_ids=frozenset(self.fw_tokenizer.eos_ids)
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
