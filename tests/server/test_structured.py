"""Structured output end to end: llama-server's `grammar` (GBNF) and `json_schema`, OpenAI's
`response_format` (json_object, json_schema), through the real server and the `openai` client. Every
constrained answer that ends by itself (finish_reason "stop") must parse and validate against its
schema with the `jsonschema` package; refusals are 400s naming the field and position; constrained
and unconstrained requests share batches without changing each other's tokens.
"""
import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from conftest import PEFT, Server

CHAT = [{"role": "user", "content": "Describe a person as JSON."}]

SCHEMAS = {
    "person": {"type": "object",
               "properties": {"name": {"type": "string", "maxLength": 24},
                              "age": {"type": "integer", "minimum": 0, "maximum": 130}},
               "required": ["name", "age"], "additionalProperties": False},
    "enum-and-bool": {"type": "object",
                      "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
                                     "note": {"type": ["string", "null"], "maxLength": 16}},
                      "required": ["color", "ok", "note"], "additionalProperties": False},
    "array": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 99},
              "minItems": 2, "maxItems": 4},
    "nested": {"type": "object",
               "properties": {"city": {"type": "string", "maxLength": 20},
                              "points": {"type": "array", "maxItems": 2,
                                         "items": {"type": "object",
                                                   "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                                   "required": ["x", "y"], "additionalProperties": False}}},
               "required": ["city", "points"], "additionalProperties": False},
    "ref": {"$defs": {"tag": {"type": "string", "enum": ["a", "b"]}},
            "type": "object", "properties": {"tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 3}},
            "required": ["tags"], "additionalProperties": False},
    "const-and-anyof": {"type": "object",
                        "properties": {"kind": {"const": "point"},
                                       "v": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                                       {"type": "string", "maxLength": 3}]}},
                        "required": ["kind", "v"], "additionalProperties": False},
}


@pytest.fixture(scope="module")
def srv():
    s = Server("--lora", f"pirate={PEFT}", "--alias", "smollm2", "--parallel", "4", "--ctx-size", "4096")
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")


def chat_json(client, schema, **kw):
    r = client.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=160, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}, **kw)
    return r.choices[0]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_outputs_validate(client, name):
    choice = chat_json(client, SCHEMAS[name])
    assert choice.finish_reason == "stop", (choice.finish_reason, choice.message.content)
    value = json.loads(choice.message.content)
    jsonschema.validate(value, SCHEMAS[name])


def test_json_schema_with_sampling_validates(client):
    # Sampled (not greedy) answers take other paths through the grammar; each must still validate.
    schema = SCHEMAS["enum-and-bool"]
    for seed in range(4):
        choice = chat_json(client, schema, seed=seed, extra_body={"temperature": 1.0, "top_k": 0, "min_p": 0})
        if choice.finish_reason == "stop":
            jsonschema.validate(json.loads(choice.message.content), schema)


def test_unconstrained_answer_is_not_json(client):
    # Guards the tests above: without the grammar the model does not answer in the schema's shape.
    r = client.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=60, temperature=0)
    text = r.choices[0].message.content
    with pytest.raises(Exception):
        jsonschema.validate(json.loads(text), SCHEMAS["person"])


def test_json_object_mode(client):
    r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Reply with a JSON "
                                                                   "object with one key."}],
                                       max_tokens=200, temperature=0, response_format={"type": "json_object"})
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:  # cut by max_tokens: a prefix of an object
        assert c.message.content.lstrip().startswith("{"), c.message.content


def test_llama_server_grammar_and_json_schema_fields(srv):
    r = srv.post("/completion", {"prompt": "Is the sea wet? Answer:", "n_predict": 8, "temperature": 0,
                                 "grammar": 'root ::= " yes" | " no"'})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["content"] in (" yes", " no") and body["stop_type"] == "eos", body
    schema = SCHEMAS["array"]
    r = srv.post("/completion", {"prompt": "Some numbers:", "n_predict": 64, "temperature": 0, "json_schema": schema})
    assert r.status_code == 200, r.text
    assert r.json()["stop_type"] == "eos", r.json()
    jsonschema.validate(json.loads(r.json()["content"]), schema)


def test_grammar_with_an_adapter(srv):
    base = srv.post("/v1/completions", {"prompt": "The sea is", "max_tokens": 40, "temperature": 0,
                                        "grammar": 'root ::= " " [a-z ]{1,60} "."'}).json()
    pirate = srv.post("/v1/completions", {"prompt": "The sea is", "max_tokens": 40, "temperature": 0, "model": "pirate",
                                          "grammar": 'root ::= " " [a-z ]{1,60} "."'}).json()
    for r in (base, pirate):
        text = r["choices"][0]["text"]
        assert text.startswith(" ") and all(ch.islower() or ch in " ." for ch in text), text
    assert base["choices"][0]["text"] != pirate["choices"][0]["text"]


def test_streamed_constrained_output(client):
    schema = SCHEMAS["person"]
    stream = client.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=160, temperature=0, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "out", "schema": schema}})
    text, finish = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "stop"
    assert text == chat_json(client, schema).message.content, "streamed and whole answers differ"
    jsonschema.validate(json.loads(text), schema)


def test_constrained_and_free_requests_share_batches(srv):
    free = {"prompt": "The three most important things about sailing are", "n_predict": 16, "temperature": 0,
            "cache_prompt": False}
    bound = {**free, "json_schema": SCHEMAS["array"], "n_predict": 40}
    solo_free = srv.post("/completion", free).json()["tokens"]
    solo_bound = srv.post("/completion", bound).json()["tokens"]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(lambda b=b: srv.post("/completion", b).json()["tokens"]) for b in [free, bound] * 4]
        got = [f.result() for f in futures]
    assert got == [solo_free, solo_bound] * 4


@pytest.mark.parametrize("body,fragment", [
    ({"grammar": 'root ::= "a" |'}, None),  # an empty alternative is valid GBNF
    ({"grammar": 'root ::= "a" b'}, "rule 'b' is used but not defined"),
    ({"grammar": 'root ::= "a'}, "grammar: line 1, column"),
    ({"grammar": 'rot ::= "a"'}, "no rule 'root'"),
    ({"grammar": 5}, "field 'grammar' must be a string"),
    ({"json_schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}, "/properties/a"),
    ({"json_schema": {"type": "string", "pattern": "a+"}}, "pattern"),
    ({"json_schema": {"type": "string"}, "grammar": 'root ::= "a"'}, "give one"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": "x"}}}},
     "response_format.json_schema.schema"),
])
def test_refusals_name_the_field(srv, body, fragment):
    r = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 4, **body})
    if fragment is None:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["type"] == "invalid_request_error" and fragment in e["message"], e
    assert srv.get("/health").status_code == 200


def test_required_tool_call_excludes_response_format(srv):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    r = srv.post("/v1/chat/completions", {"messages": CHAT, "tools": tools, "tool_choice": "required",
                                          "response_format": {"type": "json_object"}})
    assert r.status_code == 400 and "'tool_choice'" in r.json()["error"]["message"], r.text
