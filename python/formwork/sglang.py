"""formwork as an SGLang grammar backend.

    import formwork.sglang
    formwork.sglang.register()        # before the server parses its arguments
    # then: --grammar-backend formwork

``register()`` adds the name to SGLang's ``--grammar-backend`` choices
(``sglang.srt.server_args.add_grammar_backend_choices``) and registers the backend
factory (``sglang.srt.constrained.base_grammar_backend.register_grammar_backend``).
SGLang is imported only here, when ``register()`` or the factory runs.

Semantics follow SGLang's xgrammar and llguidance grammars (sglang 0.5.23): a refused
token raises ``ValueError`` (``formwork.TokenError``, the matcher unchanged), which
the scheduler turns into an aborted request; a token after the end is ignored; EOS is
allowed exactly when the text is a complete instance; ``is_terminated()`` is true once
EOS was accepted, and a rollback over it reopens the grammar. A schema formwork cannot
enforce gives SGLang's ``InvalidGrammarObject`` with the keyword and its JSON Pointer,
so the request is aborted with that message. The batch's mask is filled by one
``formwork.fill_masks`` call (``fill_vocab_mask_batched``). JSON Schema only
(``json_schema`` requests and ``json_object``); regex, EBNF and structural tags are
reported unsupported, so SGLang refuses those requests.
"""

import logging

from . import CompileError, Compiler, tokenizer_from_transformers
from . import _torch_mask

logger = logging.getLogger(__name__)

_classes = None


def _build_classes():
    """Defines the two classes on SGLang's base classes (imported here, lazily)."""
    from sglang.srt.constrained import base_grammar_backend as base

    from . import fill_masks

    invalid_cls = getattr(base, "InvalidGrammarObject", None)

    def invalid(message):
        # SGLang aborts the request with this message (GrammarManager). Older
        # SGLang had one shared INVALID_GRAMMAR_OBJ instead of the class.
        if invalid_cls is not None:
            return invalid_cls(message)
        return getattr(base, "INVALID_GRAMMAR_OBJ", None)

    class FormworkGrammar(base.BaseGrammarObject):
        def __init__(self, grammar, matcher=None):
            super().__init__()
            self.grammar = grammar
            self.matcher = matcher if matcher is not None else grammar.matcher()

        def accept_token(self, token: int) -> None:
            # As SGLang's xgrammar and llguidance grammars: a token after the end is
            # ignored, a refused token raises ValueError (TokenError is one; the
            # matcher is unchanged) and the scheduler aborts the request.
            if self.matcher.is_terminated():
                return
            self.matcher.commit_tokens([token])

        def rollback(self, k: int):
            if k <= 0:
                return
            # An EOS was committed like any token, so it is rolled back like one.
            self.matcher.rollback(k)
            self.finished = False

        def is_terminated(self):
            return self.matcher.is_terminated()

        def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device):
            # The width is the tokenizer's (the model's vocabulary, padding included),
            # as llguidance's: formwork checks it on every fill.
            return _torch_mask.allocate(batch_size, self.grammar.vocab_size)

        def fill_vocab_mask(self, vocab_mask, idx: int) -> None:
            self.matcher.fill_mask(vocab_mask, idx)

        @staticmethod
        def fill_vocab_mask_batched(entries, vocab_mask) -> None:
            """One ``formwork.fill_masks`` call for the batch (rayon, GIL released)
            when every row is formwork's; else row by row, as SGLang's default."""
            if all(isinstance(e.grammar, FormworkGrammar) for e in entries):
                if entries:
                    fill_masks([(e.grammar.matcher, e.row) for e in entries], vocab_mask)
                return
            for e in entries:
                e.grammar.fill_vocab_mask(vocab_mask, e.row)

        @staticmethod
        def reset_vocab_mask(vocab_mask) -> None:
            vocab_mask.fill_(-1)

        @staticmethod
        def move_vocab_mask(vocab_mask, device):
            return vocab_mask.to(device, non_blocking=True)

        @staticmethod
        def apply_vocab_mask(logits, vocab_mask) -> None:
            _torch_mask.apply_inplace(logits, vocab_mask)

        def copy(self):
            # SGLang caches a pristine grammar and copies it per request: a fresh
            # matcher on the same compiled grammar (no recompile).
            return FormworkGrammar(self.grammar)

        def try_jump_forward(self, tokenizer):
            ff = self.matcher.forced_tokens()
            return (ff, "") if ff else None

        def jump_forward_str_state(self, helper):
            return "", -1

        def jump_and_retokenize(self, old_output_ids, new_output_ids, next_state):
            pass

    class FormworkGrammarBackend(base.BaseGrammarBackend):
        def __init__(self, tokenizer, vocab_size=None, eos_token_ids=None):
            super().__init__()
            eos = set(eos_token_ids or [])
            own = getattr(tokenizer, "eos_token_id", None)
            if isinstance(own, int):
                eos.add(own)
            self.fw_tokenizer = tokenizer_from_transformers(
                tokenizer, vocab_size=vocab_size, eos_ids=sorted(eos)
            )
            self.compiler = Compiler(self.fw_tokenizer)

        def _compile(self, schema: str):
            try:
                return FormworkGrammar(self.compiler.json_schema(schema))
            except CompileError as e:
                logger.warning(
                    "formwork: schema refused: %s (keyword %s at %r)",
                    e, e.keyword, e.pointer,
                )
                return invalid(f"formwork: {e}")

        def dispatch_json(self, key_string: str):
            if key_string.strip() == "$$ANY$$":  # SGLang's json_object request
                key_string = '{"type": "object"}'
            return self._compile(key_string)

    return FormworkGrammar, FormworkGrammarBackend


def classes():
    """``(FormworkGrammar, FormworkGrammarBackend)``, built on SGLang's base classes."""
    global _classes
    if _classes is None:
        _classes = _build_classes()
    return _classes


def create_backend(server_args, tokenizer, vocab_size, eos_token_ids=None):
    """The factory SGLang calls: ``(server_args, tokenizer, vocab_size, eos_token_ids)``."""
    _, backend = classes()
    return backend(tokenizer, vocab_size=vocab_size, eos_token_ids=eos_token_ids)


def register(name: str = "formwork") -> None:
    """Makes ``--grammar-backend NAME`` select formwork."""
    from sglang.srt.constrained.base_grammar_backend import register_grammar_backend

    try:
        from sglang.srt.server_args import add_grammar_backend_choices
    except ImportError:  # older SGLang: the choice list is fixed
        add_grammar_backend_choices = None
    if add_grammar_backend_choices is not None:
        add_grammar_backend_choices([name])
    register_grammar_backend(name, create_backend)
