"""Records llama.cpp's greedy tokens on the Gemma 3 270M GGUF as gemma3-greedy.json.

Needs llama-cpp-python (not a dependency of formwork), for example:
    python3 -m venv /tmp/llamacpp-venv && /tmp/llamacpp-venv/bin/pip install llama-cpp-python
    /tmp/llamacpp-venv/bin/python models/testdata/gemma3-greedy.py \
        ~/.cache/formwork/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf > models/testdata/gemma3-greedy.json
"""
import json
import sys

import llama_cpp
import numpy as np
from llama_cpp import Llama

PROMPTS = [
    "The capital of France is",
    "The year 2024 had 366 days; 3.14159 is pi and 1,000,000 is a million.",
    'Here is a JSON object describing a person: {"name": "Alice", "age":',
    "Question: What is the capital of France?\nAnswer:",
]
N = 20

# This machine's CPU reports AMX, and ggml's AMX matmul (an "extra buffer
# type") segfaults here; without extra buffer types ggml uses its plain kernels.
_default_params = llama_cpp.llama_cpp.llama_model_default_params


def _params_without_extra_bufts():
    p = _default_params()
    p.use_extra_bufts = False
    return p


llama_cpp.llama_cpp.llama_model_default_params = _params_without_extra_bufts

path = sys.argv[1]
llm = Llama(model_path=path, n_ctx=512, n_threads=2, n_batch=512, verbose=False)
cases = []
for prompt in PROMPTS:
    ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
    llm.reset()
    llm.eval(ids)
    out = []
    first_top = None
    for _ in range(N):
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        logits = np.array(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)), dtype=np.float32)
        if first_top is None:
            top = np.argsort(-logits)[:5]
            first_top = [[int(t), float(logits[t])] for t in top]
        tok = int(np.argmax(logits))
        out.append(tok)
        llm.eval([tok])
    text = llm.detokenize(out).decode("utf-8", "replace")
    cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": out,
                  "greedy_text": text, "first_top5_logits": first_top})
json.dump({
    "source": "llama.cpp via llama-cpp-python %s, greedy argmax, n_threads=2, f16 KV cache (default), use_extra_bufts=False (AMX crashes here)"
              % llama_cpp.__version__,
    "model": "gemma-3-270m-q4_k_m.gguf (sha256 a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818)",
    "n": N,
    "cases": cases,
}, sys.stdout, ensure_ascii=False, indent=1)
print()
