"""Agents and tool-calling clients against `formwork serve`, unchanged.

Run by tests/serve_tools.rs as `python tools_client.py BASE_URL MODEL [CHECK ...]`;
prints one line per check and exits non-zero on the first failure. CHECK names a
part (reorder, orchestrator, orchestrator_stream, synthesis, synthesis_stream, instructor,
langchain, pydantic_ai); none runs all. `overload[:RUNS]` (run only when named, alone) is the fan-out
check of tests/serve_tools.rs's overload test.

- openai-agents 0.24: a reorder agent with two function tools and `output_type`
  (the Responses API, the SDK's default), and an orchestrator whose three tools are
  sub-agents (`Agent.as_tool`), not streamed and streamed (`Runner.run_streamed`); and
  one written with no output type and no limits, which must answer after one round of
  calls (`synthesis`).
- instructor in its default TOOLS mode, and LangChain's `bind_tools` and
  `with_structured_output(method="function_calling")` (Chat Completions).
- pydantic-ai 2.38 in its default tool output mode (the output type is a `final_result`
  tool beside the agent's own), run and streamed.
- overload: 16 orchestrator runs at once, each with three `as_tool` sub-agents, counting
  every HTTP exchange on the client's side.
"""

import asyncio
import json
import sys
from typing import Literal

from pydantic import BaseModel, Field


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)
    print(f"ok {what}", flush=True)


class Decisione(BaseModel):
    """A reorder decision for one product."""

    prodotto: str = Field(max_length=40)
    riordinare: bool
    quantita: int = Field(ge=0, le=1000)


class Parere(BaseModel):
    """One expert's opinion."""

    esperto: Literal["finanza", "logistica", "marketing"]
    favorevole: bool
    motivo: str = Field(max_length=120)


class Sintesi(BaseModel):
    """The orchestrator's final answer."""

    decisione: Literal["approvare", "rifiutare"]
    motivo: str = Field(max_length=160)


STOCK = {"viti M4": 120, "bulloni M8": 15}
ORDERS = {"viti M4": 40, "bulloni M8": 90}


def reorder(base_url, model):
    from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client
    from agents import set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    calls = []

    @function_tool
    def leggi_magazzino(prodotto: str) -> str:
        """Read how many units of a product are in stock."""
        calls.append(("leggi_magazzino", prodotto))
        return json.dumps({"prodotto": prodotto, "in_magazzino": STOCK.get(prodotto, 0)})

    @function_tool
    def leggi_ordini(prodotto: str) -> str:
        """Read how many units of a product customers have ordered."""
        calls.append(("leggi_ordini", prodotto))
        return json.dumps({"prodotto": prodotto, "ordinati": ORDERS.get(prodotto, 0)})

    agent = Agent(
        name="Riordino",
        instructions=(
            "You decide whether to reorder a product. First call both tools, leggi_magazzino "
            "and leggi_ordini, for the product, in the same turn. Then reorder when the "
            "orders exceed the stock, with quantita = orders - stock (0 otherwise)."
        ),
        tools=[leggi_magazzino, leggi_ordini],
        output_type=Decisione,
        model=model,
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=200),
    )
    result = Runner.run_sync(agent, "Product: bulloni M8", max_turns=6)
    names = {c[0] for c in calls}
    check(names == {"leggi_magazzino", "leggi_ordini"}, f"reorder: both tools called ({calls})")
    check(all(isinstance(c[1], str) and c[1] for c in calls), "reorder: arguments valid for the tools")
    check(isinstance(result.final_output, Decisione), f"reorder: final_output is a Decisione ({result.final_output!r})")
    usage = result.context_wrapper.usage
    check(usage.requests >= 2 and usage.input_tokens > 0 and usage.output_tokens > 0,
          f"reorder: usage summed over {usage.requests} requests ({usage.input_tokens} in, {usage.output_tokens} out)")


def orchestrator(base_url, model, streamed):
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, Runner,
                        set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    # The streamed run uses Chat Completions, the other the Responses API: both wires.
    if streamed:
        def m():
            return OpenAIChatCompletionsModel(model=model, openai_client=client)
    else:
        from agents import OpenAIResponsesModel

        def m():
            return OpenAIResponsesModel(model=model, openai_client=client)

    experts = []
    for area in ["finanza", "logistica", "marketing"]:
        experts.append(Agent(
            name=f"esperto_{area}",
            instructions=f"You are the {area} expert. Give your opinion on the proposal: esperto is '{area}'.",
            output_type=Parere,
            model=m(),
            model_settings=ModelSettings(temperature=0, max_tokens=120),
        ))
    tools = [
        e.as_tool(tool_name=e.name, tool_description=f"Ask the {e.name.split('_')[1]} expert for an opinion.")
        for e in experts
    ]
    boss = Agent(
        name="orchestratore",
        instructions=(
            "You decide on a proposal. Ask all three experts (esperto_finanza, esperto_logistica "
            "and esperto_marketing) at once, in one turn, passing them the proposal; then decide."
        ),
        tools=tools,
        output_type=Sintesi,
        model=m(),
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=300),
    )
    proposal = "Proposal: open a second warehouse in Turin next year."
    tag = "orchestrator streamed" if streamed else "orchestrator"

    async def go():
        if streamed:
            r = Runner.run_streamed(boss, proposal, max_turns=4)
            events = 0
            async for _ in r.stream_events():
                events += 1
            check(events > 0, f"{tag}: stream events ({events})")
            return r
        return await Runner.run(boss, proposal, max_turns=4)

    result = asyncio.run(go())
    from agents.items import ToolCallItem

    called = [it.raw_item.name for it in result.new_items if isinstance(it, ToolCallItem)]
    check(sorted(set(called)) == ["esperto_finanza", "esperto_logistica", "esperto_marketing"],
          f"{tag}: all three sub-agents called ({called})")
    first_turn = result.raw_responses[0].output
    first_calls = [o.name for o in first_turn if getattr(o, "type", "") == "function_call"]
    check(len(first_calls) == 3, f"{tag}: the three calls made in one turn ({first_calls})")
    check(isinstance(result.final_output, Sintesi), f"{tag}: final_output is a Sintesi ({result.final_output!r})")
    usage = result.context_wrapper.usage
    check(usage.input_tokens > 0 and usage.output_tokens > 0 and usage.requests >= 5,
          f"{tag}: usage summed with the sub-agents' ({usage.requests} requests, {usage.input_tokens} in)")


class Giudizio(BaseModel):
    """One reviewer's judgement of a contract clause."""

    esperto: str
    giudizio: Literal["favorevole", "contrario", "neutro"]
    motivo: str


def synthesis(base_url, model, streamed):
    """An orchestrator with no output type and no limits set, as agent programs are
    written: three reviewers (`as_tool`, each with an output type), then a text answer.
    The run must call each reviewer once, in its first turn, and end with a non-empty
    synthesis: no call repeated after the results came back, no empty final answer."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.items import ToolCallItem
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)

    def m():
        return OpenAIChatCompletionsModel(model=model, openai_client=client)

    reviewers = [
        Agent(
            name=f"revisore_{area}",
            instructions=(f"Sei il revisore {area}. Valuta la clausola dal punto di vista {area} "
                          "e rispondi con il tuo parere."),
            output_type=Giudizio,
            model=m(),
        )
        for area in ["legale", "finanziario", "operativo"]
    ]
    boss = Agent(
        name="coordinatore",
        instructions=(
            "Coordini tre revisori. Chiedi il parere a tutti e tre i revisori sulla clausola, "
            "poi scrivi una sintesi finale dei tre pareri."
        ),
        tools=[r.as_tool(tool_name=r.name, tool_description=f"Chiedi il parere del {r.name}.") for r in reviewers],
        model=m(),
    )
    clause = ("Clausola 7: il fornitore può aumentare i prezzi del 15% senza preavviso, "
              "e il cliente non può recedere prima di 36 mesi.")
    tag = "synthesis streamed" if streamed else "synthesis"

    async def go():
        if streamed:
            r = Runner.run_streamed(boss, clause, max_turns=6)
            async for _ in r.stream_events():
                pass
            return r
        return await Runner.run(boss, clause, max_turns=6)

    result = asyncio.run(go())
    called = [it.raw_item.name for it in result.new_items if isinstance(it, ToolCallItem)]
    check(sorted(called) == sorted(r.name for r in reviewers),
          f"{tag}: each reviewer called once ({called})")
    check(isinstance(result.final_output, str) and result.final_output.strip() != "",
          f"{tag}: a non-empty final answer ({result.final_output!r})")
    check(result.context_wrapper.usage.requests == 5,
          f"{tag}: two turns of the orchestrator and three reviews "
          f"({result.context_wrapper.usage.requests} requests)")


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=130)


def with_instructor(base_url, model):
    import instructor
    from openai import OpenAI

    client = instructor.from_openai(OpenAI(base_url=base_url, api_key="unused", max_retries=0),
                                    mode=instructor.Mode.TOOLS)
    p = client.chat.completions.create(
        model=model,
        response_model=Person,
        max_retries=0,
        max_tokens=80,
        messages=[{"role": "user", "content": "Ada Lovelace was 36 when she died."}],
    )
    check(isinstance(p, Person), f"instructor TOOLS: a Person ({p!r})")


def with_langchain(base_url, model):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """Get the current weather in a city."""
        return "sunny"

    llm = ChatOpenAI(base_url=base_url, api_key="unused", model=model, temperature=0,
                     max_tokens=80, max_retries=0)
    msg = llm.bind_tools([get_weather], tool_choice="required").invoke("What is the weather in Rome, in celsius?")
    calls = msg.tool_calls
    check(len(calls) >= 1 and all(c["name"] == "get_weather" for c in calls),
          f"langchain bind_tools: a get_weather call ({calls})")
    args = calls[0]["args"]
    check(set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"),
          f"langchain bind_tools: arguments valid ({args})")
    p = llm.with_structured_output(Person, method="function_calling").invoke(
        "Alan Turing was 41 when he died.")
    check(isinstance(p, Person), f"langchain with_structured_output(function_calling): a Person ({p!r})")


def with_pydantic_ai(base_url, model):
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    llm = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key="unused"))
    agent = Agent(
        llm,
        output_type=Decisione,
        instructions=("You manage a warehouse. Look up the stock of the product with the tool, "
                      "then decide whether to reorder it and how many."),
        model_settings={"temperature": 0, "max_tokens": 200},
    )
    looked_up = []

    @agent.tool_plain
    def giacenza(prodotto: str) -> int:
        """The units of a product in stock."""
        looked_up.append(prodotto)
        return STOCK.get(prodotto, 0)

    def tool_calls(messages):
        return [p.tool_name for m in messages if isinstance(m, ModelResponse)
                for p in m.parts if isinstance(p, ToolCallPart)]

    question = "bulloni M8: we have orders for 90. Reorder?"
    r = agent.run_sync(question)
    check(isinstance(r.output, Decisione), f"pydantic-ai: output is a Decisione ({r.output!r})")
    calls = tool_calls(r.all_messages())
    check(calls and calls[-1] == "final_result",
          f"pydantic-ai: the output came through its output tool ({calls})")
    usage = r.usage() if callable(r.usage) else r.usage
    check(usage.requests >= 1 and usage.output_tokens > 0,
          f"pydantic-ai: usage ({usage.requests} requests, {usage.output_tokens} out)")

    async def streamed():
        async with agent.run_stream(question) as s:
            out = await s.get_output()
            return out, s.all_messages()

    out, messages = asyncio.run(streamed())
    check(isinstance(out, Decisione), f"pydantic-ai streamed: output is a Decisione ({out!r})")
    calls = tool_calls(messages)
    check(calls and calls[-1] == "final_result",
          f"pydantic-ai streamed: through its output tool ({calls})")


def overload(base_url, model, runs=16):
    """`runs` orchestrators at once, three sub-agents each, against a server with few slots
    and a short queue. Every HTTP exchange is counted here; the test compares the counts
    with the server's metrics. Prints one JSON line: the counts by status, the queue_full
    refusals (503, Retry-After: 1), the sub-agents called, and how each run ended."""
    import httpx
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.items import ToolCallItem
    from openai import APIStatusError, AsyncOpenAI

    set_tracing_disabled(True)
    sent = {"n": 0}
    status = {}
    refusals = {}

    async def on_request(request):
        sent["n"] += 1

    async def on_response(response):
        status[response.status_code] = status.get(response.status_code, 0) + 1
        if response.status_code != 200:
            await response.aread()
            try:
                code = response.json()["error"]["code"]
            except Exception:
                code = "not an OpenAI error"
            refusals[code] = refusals.get(code, 0) + 1

    http = httpx.AsyncClient(timeout=600, event_hooks={"request": [on_request], "response": [on_response]})
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http)

    def m():
        return OpenAIChatCompletionsModel(model=model, openai_client=client)

    def boss(i):
        reviewers = [
            Agent(name=f"revisore_{area}", instructions=f"Sei il revisore {area}. Dai il tuo parere.",
                  output_type=Giudizio, model=m(), model_settings=ModelSettings(max_tokens=60))
            for area in ["legale", "finanziario", "operativo"]
        ]
        return Agent(
            name=f"coordinatore_{i}",
            instructions="Chiedi il parere ai tre revisori, poi scrivi una sintesi.",
            tools=[r.as_tool(tool_name=r.name, tool_description=f"Il parere del {r.name}.") for r in reviewers],
            model=m(),
            # The first turn calls (the SDK resets tool_choice after it): a fan-out each run.
            model_settings=ModelSettings(max_tokens=60, tool_choice="required"),
        )

    calls = {"n": 0}

    async def one(i):
        try:
            r = await Runner.run(boss(i), f"Clausola {i}: il prezzo sale del {i}% ogni anno.", max_turns=6)
            calls["n"] += sum(isinstance(it, ToolCallItem) for it in r.new_items)
            return "answered" if isinstance(r.final_output, str) and r.final_output.strip() else "empty"
        except APIStatusError as e:
            # The server's refusal when its slots and queue are full (503 queue_full).
            return "refused" if e.status_code == 503 else f"{e.status_code}"
        except Exception as e:  # noqa: BLE001 - any other end is what the test must see
            return f"{type(e).__name__}: {e}"[:200]

    async def go():
        ends = await asyncio.gather(*(one(i) for i in range(runs)))
        await http.aclose()
        return ends

    ends = asyncio.run(go())
    tally = {}
    for e in ends:
        tally[e] = tally.get(e, 0) + 1
    print(json.dumps({"sent": sent["n"], "sub_agent_calls": calls["n"], "status": {str(k): v for k, v in status.items()},
                      "refusals": refusals, "runs": tally}), flush=True)
    check(sum(status.values()) == sent["n"], f"overload: every request got one response ({sent['n']} sent, {status})")
    check(set(status) <= {200, 503}, f"overload: answered or refused, nothing else ({status})")
    check(set(refusals) <= {"queue_full"}, f"overload: refusals are queue_full ({refusals})")
    check(set(tally) <= {"answered", "empty", "refused"}, f"overload: every run ended cleanly ({tally})")


def main(base_url, model, only):
    parts = {
        "reorder": lambda: reorder(base_url, model),
        "orchestrator": lambda: orchestrator(base_url, model, streamed=False),
        "orchestrator_stream": lambda: orchestrator(base_url, model, streamed=True),
        "synthesis": lambda: synthesis(base_url, model, streamed=False),
        "synthesis_stream": lambda: synthesis(base_url, model, streamed=True),
        "instructor": lambda: with_instructor(base_url, model),
        "langchain": lambda: with_langchain(base_url, model),
        "pydantic_ai": lambda: with_pydantic_ai(base_url, model),
    }
    if len(only) == 1 and only[0].split(":")[0] == "overload":
        overload(base_url, model, int(only[0].split(":")[1]) if ":" in only[0] else 16)
        print("all checks passed", flush=True)
        return
    for name, run in parts.items():
        if not only or name in only:
            run()
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
