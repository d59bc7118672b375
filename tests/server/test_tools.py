"""Tool calls end to end through the `openai` client (docs/SERVER.md, Tool calls). SmolLM2's template
knows no tools, so the server takes its generic style (tools described in a system message, calls in
<tool_call> tags); SmolLM2 does not call tools well by itself, so the mechanics are tested with
constrained calls (tool_choice required / a named function), whose arguments must validate against
the function's schema (jsonschema). Greedy, few tokens.
"""
import json

import jsonschema
import openai
import pytest

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"$ref": "#/$defs/zone"}}, "required": ["zone"],
        "additionalProperties": False, "$defs": {"zone": {"enum": ["UTC", "CET", "JST"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
                                           "parameters": TIME}}]
SCHEMA = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_time"}}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def ask(client, **kw):
    args = dict(model="smollm2", messages=ASK, tools=TOOLS, max_tokens=80, temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


def check_calls(calls, names=SCHEMA):
    assert calls, "no tool call"
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_"), c
        assert c.function.name in names, c
        jsonschema.validate(json.loads(c.function.arguments), SCHEMA[c.function.name])


def streamed(client, **kw):
    """The stream's deltas assembled as a client does: content, and calls by index."""
    content, calls, finish, ids = "", {}, None, {}
    for chunk in ask(client, stream=True, **kw):
        for ch in chunk.choices:
            d = ch.delta
            if d.content:
                content += d.content
            for tc in d.tool_calls or []:
                if tc.id:
                    assert tc.index not in calls, "a call opened twice"
                    calls[tc.index] = {"name": tc.function.name, "arguments": tc.function.arguments or ""}
                    ids[tc.index] = tc.id
                elif tc.function and tc.function.arguments:
                    calls[tc.index]["arguments"] += tc.function.arguments
            finish = ch.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish, ids


def test_required_call_validates(client):
    r = ask(client, tool_choice="required")
    c = r.choices[0]
    check_calls(c.message.tool_calls)
    # Parallel calls allowed: SmolLM2 goes on calling until max_tokens; the call cut off is dropped:
    # never text in `content`, never arguments that do not parse.
    assert c.finish_reason in ("length", "tool_calls"), c
    assert c.message.content is None, c.message
    # Streamed, the same calls (each sent whole once complete), the same finish, no content.
    content, calls, finish, _ = streamed(client, tool_choice="required")
    assert (content, finish) == ("", c.finish_reason), (content, finish)
    assert [(x["name"], x["arguments"]) for x in calls] == \
        [(t.function.name, t.function.arguments) for t in c.message.tool_calls]
    for x in calls:
        jsonschema.validate(json.loads(x["arguments"]), SCHEMA[x["name"]])


@pytest.mark.parametrize("max_tokens", [12, 30, 47])
def test_a_call_cut_off_by_max_tokens_is_dropped_both_ways(client, max_tokens):
    whole = ask(client, tool_choice="required", max_tokens=max_tokens).choices[0]
    assert whole.finish_reason == "length" and whole.message.content in (None, ""), whole
    for t in whole.message.tool_calls or []:
        jsonschema.validate(json.loads(t.function.arguments), SCHEMA[t.function.name])
    content, calls, finish, _ = streamed(client, tool_choice="required", max_tokens=max_tokens)
    assert (content, finish) == ("", "length")
    assert [(x["name"], x["arguments"]) for x in calls] == \
        [(t.function.name, t.function.arguments) for t in whole.message.tool_calls or []]


def test_named_function_streamed_and_whole_agree(client):
    whole = ask(client, tool_choice=NAMED).choices[0]
    assert whole.finish_reason == "tool_calls"
    check_calls(whole.message.tool_calls, names={"get_time"})
    assert len(whole.message.tool_calls) == 1
    content, calls, finish, ids = streamed(client, tool_choice=NAMED)
    assert finish == "tool_calls" and content == "", (finish, content)
    assert [(c["name"], c["arguments"]) for c in calls] == \
        [(t.function.name, t.function.arguments) for t in whole.message.tool_calls]
    assert ids[0].startswith("call_")


def test_parallel_tool_calls_false_gives_one_call(client):
    c = ask(client, tool_choice="required", parallel_tool_calls=False).choices[0]
    assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c


def test_follow_up_turn_with_a_tool_message(client):
    first = ask(client, tool_choice="required").choices[0].message
    call = first.tool_calls[0]
    history = ASK + [{"role": "assistant", "content": None,
                      "tool_calls": [{"id": call.id, "type": "function",
                                      "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                     {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})}]
    r = ask(client, messages=history, tool_choice="none", max_tokens=24)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length") and isinstance(c.message.content, str) and c.message.content, c
    assert not c.message.tool_calls
    # The history reached the prompt: longer than the question alone.
    alone = ask(client, tool_choice="none", max_tokens=1)
    assert r.usage.prompt_tokens > alone.usage.prompt_tokens + 20, (r.usage, alone.usage)


def test_none_produces_text_from_the_prompt_without_tools(client):
    none = ask(client, tool_choice="none", max_tokens=16)
    plain = client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=16, temperature=0)
    assert none.choices[0].message.content == plain.choices[0].message.content
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens
    assert not none.choices[0].message.tool_calls
    auto = ask(client, max_tokens=1)  # auto: the tools are described in the prompt
    assert auto.usage.prompt_tokens > plain.usage.prompt_tokens + 50


def error_of(r, status, type_="invalid_request_error"):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert e["type"] == type_, e
    return e["message"]


@pytest.mark.parametrize("extra,field", [
    ({"tools": [{"type": "function"}]}, "'tools[0].function'"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "'tools[0].function.name'"),
    ({"tools": [TOOLS[0], {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}}}]},
     "'tools[1].function.parameters'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "'tool_choice.function.name'"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "'tool_choice'"),
    ({"tool_choice": "required"}, "'tool_choice'"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "'tool_choice'"),
    ({"messages": ASK + [{"role": "tool", "content": "21"}]}, "'messages[1].tool_call_id'"),
    ({"messages": ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": "{oops"}}]}]},
     "'messages[1].tool_calls[0].function.arguments'"),
])
def test_bad_tools_are_400_naming_the_field(server, extra, field):
    body = {"messages": ASK, "max_tokens": 1, **extra}
    assert field in error_of(server.post("/v1/chat/completions", body), 400)
    assert server.get("/health").status_code == 200


def test_tools_elsewhere_and_the_functions_api_are_refused(server):
    r = server.post("/v1/completions", {"prompt": "x", "tools": TOOLS, "max_tokens": 1})
    assert "'tools'" in error_of(r, 400)
    r = server.post("/v1/chat/completions", {"messages": ASK, "functions": [{"name": "f"}], "max_tokens": 1})
    assert "'functions'" in error_of(r, 501, "not_supported_error")


def test_a_call_cut_by_max_tokens_before_any_is_complete(client):
    # The cut call is dropped, not left as text: no calls, empty content, finish_reason says why.
    c = ask(client, tool_choice="required", max_tokens=10).choices[0]
    assert c.finish_reason == "length" and not c.message.tool_calls, c
    assert c.message.content in (None, ""), c.message.content
