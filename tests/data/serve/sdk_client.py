"""The real OpenAI Python SDK and openai-agents against `formwork serve`.

Run by tests/serve_sdk.rs as `python sdk_client.py BASE_URL MODEL`; prints one line
per check and exits non-zero on the first failure. On the default model
(qwen2.5-coder-0.5b) the values are checked too; the small test model is only held to
the shapes.
"""

import json
import sys
from typing import Literal

from pydantic import BaseModel, Field


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=130)
    role: Literal["engineer", "poet", "mathematician"]


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)
    print(f"ok {what}", flush=True)


def main(base_url: str, model: str) -> None:
    import openai

    # The default model reads these sentences right; the 135M test model need not.
    values = model == "qwen2.5-coder-0.5b"

    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    messages = [
        {"role": "system", "content": "You turn sentences about people into JSON."},
        {"role": "user", "content": "Ada Lovelace, a mathematician, died at 36."},
    ]

    # 1. chat.completions.parse with a Pydantic model, not streamed.
    done = client.chat.completions.parse(
        model=model, messages=messages, response_format=Person, max_completion_tokens=60
    )
    msg = done.choices[0].message
    check(isinstance(msg.parsed, Person), f"parse: parsed is a Person ({msg.parsed!r})")
    if values:
        check(msg.parsed == Person(name="Ada Lovelace", age=36, role="mathematician"),
              "parse: the values are the sentence's")
    check(done.choices[0].finish_reason == "stop", "parse: finish_reason stop")
    extra = done.model_extra or {}
    check(extra.get("formwork", {}).get("verdict") == "valid", "parse: formwork.verdict valid")
    check(done.usage.prompt_tokens_details is not None, "parse: usage.prompt_tokens_details")

    # 2. The same, streamed: deltas, then the parsed final completion.
    with client.chat.completions.stream(
        model=model, messages=messages, response_format=Person, max_completion_tokens=60,
        stream_options={"include_usage": True},
    ) as stream:
        deltas = 0
        for event in stream:
            if event.type == "content.delta":
                deltas += 1
        final = stream.get_final_completion()
    check(deltas > 1, f"stream: {deltas} content deltas")
    parsed = final.choices[0].message.parsed
    check(isinstance(parsed, Person), f"stream: parsed is a Person ({parsed!r})")
    check(final.usage is not None and final.usage.completion_tokens > 0, "stream: usage chunk")

    # 3. A bad schema is a 400 the SDK raises as BadRequestError, never retried as a 500.
    try:
        client.chat.completions.create(
            model=model, messages=messages,
            response_format={"type": "json_schema", "json_schema": {
                "name": "Tags", "schema": {"type": "array", "contains": {"type": "string"}}}},
        )
        check(False, "bad schema: raised")
    except openai.BadRequestError as e:
        check(e.code == "unsupported_schema_keyword", f"bad schema: code {e.code}")
        check(str(e.message).find("Invalid schema for response_format 'Tags':") >= 0, "bad schema: message prefix")

    # 4. openai-agents, unchanged: the default model class (the Responses API).
    import asyncio

    from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0))
    agent = Agent(
        name="extractor",
        instructions="Turn the sentence about a person into JSON.",
        model=model,
        output_type=Person,
    )
    result = asyncio.run(Runner.run(agent, "Alan Turing, a mathematician, died at 41."))
    check(isinstance(result.final_output, Person), f"agents: final_output is a Person ({result.final_output!r})")
    if values:
        check(result.final_output.name == "Alan Turing" and result.final_output.age == 41,
              "agents: the values are the sentence's")
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
