"""OpenAI SDK against `formwork serve` on a thinking model (tests/serve_think.rs).

The model is a synthesised Qwen3-shaped file (random weights): its text is noise, so
this checks shape and validity, not content. argv: base_url model.
"""
import sys

import openai
import pydantic


class City(pydantic.BaseModel):
    name: str
    population: int


def main(base, model):
    c = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
    msgs = [{"role": "user", "content": "Name a city and its population."}]
    extra = {"formwork_think_budget": 8}
    r = c.chat.completions.parse(
        model=model, messages=msgs, response_format=City, max_completion_tokens=60, extra_body=extra
    )
    m = r.choices[0].message
    assert isinstance(m.parsed, City), m
    rc = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get("reasoning_content")
    assert isinstance(rc, str), m
    d = r.usage.completion_tokens_details
    assert 8 <= d.reasoning_tokens <= r.usage.completion_tokens, r.usage
    print("parse: ok", repr(rc[:40]), m.content)

    # Streamed: reasoning_content deltas first, then the content; the parsed object at the end.
    thought, order = "", []
    with c.chat.completions.stream(
        model=model, messages=msgs, response_format=City, max_completion_tokens=60, extra_body=extra
    ) as s:
        for ev in s:
            if ev.type == "chunk":
                delta = ev.chunk.choices[0].delta if ev.chunk.choices else None
                extra_d = (delta.model_extra or {}) if delta else {}
                if extra_d.get("reasoning_content"):
                    thought += extra_d["reasoning_content"]
                    order.append("r")
                if delta is not None and delta.content:
                    order.append("c")
        final = s.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, City), final
    assert thought, "no reasoning_content delta"
    assert "c" in order and order.index("c") > order.index("r"), order
    print("stream: ok", repr(thought[:40]))

    # reasoning_effort: none answers without thought; a bad value is a 400 naming it.
    r = c.chat.completions.parse(
        model=model, messages=msgs, response_format=City, max_completion_tokens=60,
        reasoning_effort="none",
    )
    assert isinstance(r.choices[0].message.parsed, City)
    assert r.usage.completion_tokens_details.reasoning_tokens == 0, r.usage
    try:
        c.chat.completions.create(model=model, messages=msgs, extra_body={"reasoning_effort": "huge"})
        raise AssertionError("a bad reasoning_effort was accepted")
    except openai.BadRequestError as e:
        assert "reasoning_effort" in str(e), e
    print("all checks passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
