#!/usr/bin/env python3
"""Regenerates tests/fixtures/chat_templates/: real chat templates (*.jinja) and reference.json,
the strings python jinja2 renders for them the way transformers' apply_chat_template does.

Run by developers (needs `pip install jinja2`, and `gguf` for the SmolLM2 GGUF template), not CI:
    python3 tools/gen_chat_template_fixtures.py

The environment mirrors transformers (utils/chat_template_utils.py): ImmutableSandboxedEnvironment
with trim_blocks=True, lstrip_blocks=True, the loopcontrols extension and the {% generation %}
tag, a tojson filter that is json.dumps(ensure_ascii=False, ...), and the raise_exception /
strftime_now globals; render() gets messages, tools=None, documents=None, add_generation_prompt
and the special tokens, plus any extra keyword arguments.

The model templates are written from the tokenizer_config.json files the models ship (there is
no network here); smollm2_gguf.jinja is read from the GGUF's tokenizer.chat_template metadata.
The features_* / syntax_* templates are synthetic, to cover the language beyond real templates.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


# ---------------------------------------------------------------- environment (as transformers)
class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_assistant"), [], [], body).set_lineno(lineno)

    def _render_assistant(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---------------------------------------------------------------- templates
T = {}

# HuggingFaceTB/SmolLM2-135M-Instruct (ChatML with a default system prompt).
T["smollm2"] = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Qwen/Qwen2-7B-Instruct.
T["qwen2"] = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Qwen/Qwen2.5-7B-Instruct (tools in the system prompt, <tool_call> / <tool_response>).
T["qwen2_5"] = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# meta-llama/Meta-Llama-3-8B-Instruct.
T["llama3"] = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

# meta-llama/Llama-3.1-8B-Instruct (date_string, tools, ipython).
T["llama3_1"] = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# meta-llama/Llama-2-7b-chat-hf.
T["llama2"] = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

# mistralai/Mistral-7B-Instruct-v0.1 (original template).
T["mistral_v01"] = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

# mistralai/Mistral-7B-Instruct-v0.2 (later revision, optional system message).
T["mistral_v02"] = r"""{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

# mistralai/Mistral-7B-Instruct-v0.3 (tools, tool calls with 9-character ids).
T["mistral_v03"] = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# google/gemma-2b-it (no system role, 'model' turns).
T["gemma"] = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")

# microsoft/Phi-3-mini-4k-instruct.
T["phi3"] = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")

# HuggingFaceH4/zephyr-7b-beta (relies on trim_blocks: the newline after each tag is dropped).
T["zephyr"] = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")

# The ChatML template again with Windows line endings and tags on their own, indented lines.
T["chatml_crlf"] = (
    "{% for message in messages %}\r\n"
    "    {% if loop.first and message.role != 'system' %}\r\n"
    "<|im_start|>system\r\nDefault system prompt.<|im_end|>\r\n"
    "    {% endif %}\r\n"
    "<|im_start|>{{ message.role }}\r\n{{ message.content }}<|im_end|>\r\n"
    "{% endfor %}\r\n"
    "{% if add_generation_prompt %}\r\n<|im_start|>assistant\r\n{% endif %}\r\n")

# Synthetic: whitespace control in all its forms.
T["syntax_whitespace"] = """Start
  {% if true %}
    indented text
  {% endif %}
  {%+ if true %}keep-lstrip{% endif +%}
after plus
{# a comment #}
  {#- comment with strip -#}
text after comment
{%- for m in messages %}
  - {{ m.role -}}
  ,   {{- m.content }}
{% endfor %}
    {{ 'var not lstripped' }}
\t{% if true -%}
   stripped leading
{%- endif %}
  trailing spaces   \n{% raw -%}
  raw {{ x }} {% if %}
{%- endraw %}
{% raw %}{{ kept }}{% endraw %}
  {# indented comment #}
  {{- '  dash var  ' -}}
  end{{ '' }}
{% for i in range(2) %}
    {% for j in range(2) %}
        {{ i }}{{ j }}
    {% endfor %}
{% endfor %}
End
"""

# Synthetic: expressions, operators, literals, tests and str/dict methods.
T["features_expr"] = r"""{{ 1 + 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ 1.5 * 2 }}|{{ 0.1 + 0.2 }}|{{ 1e3 }}|{{ 10 / 4 * 2 }}|{{ 2 + 3 * 4 }}|{{ (2 + 3) * 4 }}|{{ -2 ** 2 }}|{{ 1_000 + 0x10 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}
{{ "a" ~ 1 ~ none ~ true }}|{{ 'x' * 3 }}|{{ [1, 2] + [3] }}|{{ (1, 'two') }}|{{ (1,) }}|{{ () }}|{{ {'k': 'v', 'n': [1, 2.5, none, false]} }}|{{ 'a' 'b' }}|{{ 1e100 }}|{{ 1.0 }}|{{ 123456789.0 * 1000000000 }}|{{ 1 / 3 }}
{{ 3 > 2 and 2 > 3 }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ not 0 }}|{{ '' or 'fallback' }}|{{ 'first' and 'second' }}|{{ 'ell' in 'hello' }}|{{ 2 not in [1, 3] }}|{{ 'role' in messages[0] }}|{{ not 'x' in ['x'] }}
{{ messages[0].role }}|{{ messages[0]['role'] }}|{{ messages[-1].content[:5] }}|{{ messages[1:] | length }}|{{ messages[::-1][0].role }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[::2] }}|{{ 'abcdef'[-2:] }}|{{ 'abcdef'[::-1] }}|{{ [1, 2, 3, 4, 5][4:0:-2] }}|{{ messages.0.role }}|{{ [1, 2][5] }}
{{ 'yes' if messages | length > 1 else 'no' }}|{{ 'x' if false }}|{{ undefined_thing }}|{{ undefined_thing is defined }}|{{ messages[0].nope is defined }}|{{ messages[0].nope | default('dflt') }}|{{ undefined_thing is undefined }}|{{ tools is none }}|{{ documents is defined }}|{{ undefined_thing ~ '!' }}
{{ none }}|{{ true }}|{{ False }}|{{ None is none }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' != 'b' }}|{{ [1, 2] == [1, 2] }}|{{ {'a': 1} == {'a': 1} }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(4) }}|{{ 'x' is string }}|{{ 1 is number }}|{{ 1.5 is float }}|{{ 1 is integer }}|{{ true is boolean }}|{{ messages is iterable }}|{{ messages is sequence }}|{{ messages[0] is mapping }}|{{ none is not none }}|{{ 'ab' is lower }}|{{ 'AB' is upper }}|{{ 2 is in [1, 2] }}|{{ 2 is eq 2 }}|{{ 3 is gt 2 }}|{{ 'x' is iterable }}|{{ 1 is iterable }}|{{ raise_exception is callable }}
{{ "  padded  ".strip() }}|{{ "a,b,,c".split(",") }}|{{ " a  b ".split() }}|{{ "a b c".split(" ", 1) }}|{{ "a b c".rsplit(" ", 1) }}|{{ "Hello".upper() }}|{{ "Hello".lower() }}|{{ "Hello".startswith("He") }}|{{ "Hello".endswith(("x", "lo")) }}|{{ "xxhixx".strip("x") }}|{{ "  l".lstrip() }}|{{ "r  ".rstrip() }}|{{ "a-b-c".replace("-", "+") }}|{{ "hello world's".title() }}|{{ "abc".find("c") }}|{{ "l1\nl2\r\nl3".splitlines() }}|{{ "-".join(["a", "b"]) }}|{{ "aaa".count("a") }}|{{ "123".isdigit() }}|{{ "hello".capitalize() }}|{{ "<think>x".removeprefix("<think>") }}
{{ 'it\'s' }}|{{ "say \"hi\"" }}|{{ 'tab\tnew\nline' }}|{{ '\u00e9\x41\101' }}|{{ 'ünï' | length }}|{{ ['it\'s', "q", 'both\'"', 'nl\n'] }}|{{ 'back\\slash' }}|{{ 'unknown \d escape' }}|{{ '\U0001F600' }}
{{ {'b': 1, 'a': 2}.items() | list }}|{{ {'b': 1}.get('b') }}|{{ {'b': 1}.get('z', 'none!') }}|{{ {'b': 1}.get('z') }}|{{ {'a': 1}.keys() | list }}|{{ {'a': 1}.values() | list }}|{{ range(3) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0, -2) | list }}|{{ dict(a=1, b='x') }}|{{ [1, 2, 1].count(1) }}|{{ messages[0]['items'] is defined }}
"""

# Synthetic: filters.
T["features_filters"] = r"""{{ messages | map(attribute='role') | join(', ') }}
{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | selectattr('role', '==', 'user') | list | length }}|{{ messages | selectattr('content') | list | length }}
{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list }}
{{ messages | map(attribute='content') | map('length') | list }}
{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}
{{ [1, 2, 2, 3, 1] | unique | list }}|{{ ['a', 'A', 'b'] | unique | list }}|{{ [1, 5, 3] | max }}|{{ [1, 5, 3] | min }}|{{ ['b', 'C', 'a'] | max }}|{{ [1, 2, 3] | sum }}|{{ [1.5, 2] | sum(start=1) }}|{{ [1, 2, 3] | first }}|{{ [1, 2, 3] | last }}|{{ 'abc' | first }}|{{ [] | first }}|{{ messages | first | tojson }}
{{ '  trim me  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'mixed Case' | upper }}|{{ 'mixed Case' | lower }}|{{ 'hello WORLD' | capitalize }}|{{ 'hello-world foo(bar) it\'s' | title }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'aaa' | replace('a', 'xy') }}|{{ 'ÉCOLE ß' | lower }}|{{ 'straße' | upper }}|{{ 'ünï' | upper }}
{{ 42 | string }}|{{ '42' | int + 1 }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ ' 12 ' | int }}|{{ 'ff' | int(base=16) }}|{{ 3.9 | int }}|{{ none | int }}|{{ '3.5' | float }}|{{ 3 | float }}|{{ 'abc' | float }}|{{ -3 | abs }}|{{ -2.5 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.1 | round(0, 'ceil') }}|{{ 2.9 | round(0, 'floor') }}|{{ 7 | round }}
{{ {'b': 1, 'a': 2} | items | list }}|{{ {'b': 1, 'a': 2} | dictsort }}|{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}|{{ 'abc' | list }}|{{ 'abc' | reverse }}|{{ [1, 2, 3] | reverse | list }}|{{ 'abc' | length }}|{{ {'a': 1} | length }}|{{ nothing | length }}|{{ messages | count }}|{{ nothing | items | list }}
{{ messages[0] | tojson }}|{{ {'a': [1, 2.0, none, true, 'é"\n\t\\'], 'b': {}} | tojson }}|{{ {'b': 1, 'a': {'c': [], 'd': [1, {'e': none}]}} | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 'ü😀' | tojson(true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}|{{ 'x' | tojson }}|{{ 1.5e20 | tojson }}|{{ (1, 2) | tojson }}
{{ '' | default('empty', true) }}|{{ '' | default('empty') }}|{{ nothing | default('dflt') }}|{{ nothing | d('d') }}|{{ none | default('n') }}|{{ '<a href="x">&\'</a>' | e }}|{{ 'x' | safe }}
{{ 'line1\nline2\n\nline3' | indent(2) }}|{{ 'l1\nl2' | indent(2, true) }}|{{ 'l1\n\nl2' | indent('> ', blank=true) }}
{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|{{ [0, 1, '', 'x'] | select | list }}|{{ messages | map(attribute='missing', default='?') | list }}|{{ ['a', 'b'] | map('upper') | list }}|{{ [1, 2, 3] | select('gt', 1) | list }}|{{ ['a', 'bb'] | map('replace', 'b', 'c') | list }}
{% filter trim | upper %}   filtered block for {{ messages | length }} messages   {% endfilter %}
{% set block | trim %}   set block with filter   {% endset %}[{{ block }}]
"""

# Synthetic: control structures, scoping, macros, namespaces, loop variables.
T["features_control"] = r"""{%- macro render(msg, prefix='> ', upper=false) -%}
{{ prefix }}{{ msg.role | upper if upper else msg.role }}: {{ msg.content | trim }}
{%- endmacro -%}
{%- macro counter(n) %}{% for i in range(n) %}{{ i }}{% endfor %}{% endmacro -%}
{%- set ns = namespace(count=0, last_role=none, found=false) -%}
{%- for m in messages -%}
{%- set ns.count = ns.count + 1 -%}
{%- if m.role == 'user' and not ns.found %}{% set ns.found = true %}{% endif -%}
[{{ loop.index }}/{{ loop.length }} i0={{ loop.index0 }} rev={{ loop.revindex }}/{{ loop.revindex0 }} first={{ loop.first }} last={{ loop.last }} prev={{ loop.previtem.role if loop.previtem is defined else '-' }} next={{ loop.nextitem.role if loop.nextitem is defined else '-' }} {{ loop.cycle('odd', 'even') }}]
{{ render(m, upper=loop.first) }}
{{ render(m, '# ') }}
{% set ns.last_role = m.role %}
{%- endfor %}
count={{ ns.count }} last={{ ns.last_role }} found={{ ns.found }} counter={{ counter(3) }} {{ counter(n=2) }}
{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if not loop.last %}, {% endif %}{% endfor %}

{% for m in messages %}{% if loop.index > 3 %}{% break %}{% endif %}{% if m.role == 'system' %}{% continue %}{% endif %}<{{ m.role }}>{% endfor %}

{% for k, v in {'a': 1, 'b': [2, 3]}.items() %}{{ k }}={{ v }};{% endfor %}
{% for k, v in {'x': 1} | items %}{{ k }}->{{ v }}{% endfor %}
{% for c in 'abc' %}{{ c }}{% else %}empty{% endfor %}/{% for x in [] %}{{ x }}{% else %}empty{% endfor %}/{% for x in nothing %}{{ x }}{% else %}undefined-empty{% endfor %}
{% for key in {'p': 1, 'q': 2} %}{{ key }}{% endfor %}
{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }},{% endfor %}
{% for row in [[1, 2], [3]] %}{% for x in row %}{{ loop.index }}.{{ x }} {% endfor %}|{% endfor %}
{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %} after={{ x }}
{% if true %}{% set leaked = 'if-sets-leak' %}{% endif %}{{ leaked }}
{% set captured %}Captured {{ messages | length }} messages{% endset %}{{ captured | upper }}
{% set a, b = 1, 2 %}{{ a }}{{ b }}
{% with y = 5, z = 6 %}{{ y * z }}{% endwith %}{{ y is defined }}
{% filter upper %}filtered {{ messages[0].role }}{% endfilter %}
{% if messages[0].role == 'system' %}sys{% elif messages | length > 2 %}long{% else %}other{% endif %}
{% if messages[0].content %}{{ messages[0].content | length }}{% endif %}
{% generation %}gen:{{ messages[-1].role }}{% endgeneration %}
{% print 'printed', 1 %}
{%- if add_generation_prompt %}
GEN {{ bos_token }}{{ eos_token }}
{%- endif %}
"""

TOKENS = {
    "smollm2": ("<|im_start|>", "<|im_end|>"),
    "smollm2_gguf": ("<|im_start|>", "<|im_end|>"),
    "qwen2": ("", "<|im_end|>"),
    "qwen2_5": ("", "<|im_end|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3_1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama2": ("<s>", "</s>"),
    "mistral_v01": ("<s>", "</s>"),
    "mistral_v02": ("<s>", "</s>"),
    "mistral_v03": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "zephyr": ("<s>", "</s>"),
    "chatml_crlf": ("<s>", "</s>"),
    "syntax_whitespace": ("<s>", "</s>"),
    "features_expr": ("<s>", "</s>"),
    "features_filters": ("<s>", "</s>"),
    "features_control": ("<BOS>", "<EOS>"),
}


def gguf_template():
    try:
        import gguf
    except ImportError:
        sys.exit("gguf is not installed: pip install gguf")
    if not os.path.exists(GGUF):
        sys.exit(f"missing {GGUF} (make models)")
    r = gguf.GGUFReader(GGUF)
    f = r.fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


# ---------------------------------------------------------------- conversations
M = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are a pirate."},
                    {"role": "user", "content": "Hi there"}],
    "multi_turn": [{"role": "user", "content": "What is 2+2?"},
                   {"role": "assistant", "content": "4"},
                   {"role": "user", "content": "And 3+3?"}],
    "system_multi_turn": [{"role": "system", "content": "Answer briefly."},
                          {"role": "user", "content": "Capital of France?"},
                          {"role": "assistant", "content": "Paris."},
                          {"role": "user", "content": "And of Italy?"}],
    "assistant_last": [{"role": "user", "content": "Say hi"},
                       {"role": "assistant", "content": "Hi!"}],
    "tricky": [{"role": "system", "content": "  Be terse.\n"},
               {"role": "user", "content": "Line one\nLine two\n\n  indented  \t"},
               {"role": "assistant",
                "content": "Quotes: 'single' \"double\" and \\backslash\\ — ünïcödé 日本語 🚀"},
               {"role": "user", "content": "{{ not a tag }} {% neither %} <|im_end|> tab\there\r\nCRLF"}],
    "empty_content": [{"role": "user", "content": ""}],
    "bad_alternation": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "tool_use": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "call12345", "type": "function",
                         "function": {"name": "get_weather",
                                      "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
         "content": "{\"temperature\": 21, \"unit\": \"celsius\"}"},
        {"role": "assistant", "content": "It is 21 °C in Paris."},
    ],
    # Two calls in one turn and their two results (graft's server turns OpenAI's string arguments
    # into these objects before rendering: tests/server/tool_calls_test.cpp).
    "tool_use_parallel": [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather in Paris and in Tokyo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_a", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                        {"id": "call_b", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Tokyo", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "21"},
        {"role": "tool", "tool_call_id": "call_b", "content": "18"},
    ],
}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "The city name"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]

# (template, message set, extra render kwargs) beyond the all-templates x plain-sets grid.
EXTRA_CASES = [
    ("qwen2_5", "tool_use", {"tools": TOOLS}),
    ("qwen2_5", "system_user", {"tools": TOOLS}),
    ("qwen2_5", "tool_use", {}),
    ("qwen2_5", "tool_use_parallel", {"tools": TOOLS}),
    ("llama3_1", "tool_use", {"tools": TOOLS}),
    ("llama3_1", "system_multi_turn", {"tools": TOOLS, "date_string": "01 Jan 2025"}),
    ("llama3_1", "tool_use", {"tools": TOOLS, "tools_in_user_message": False}),
    ("llama3_1", "multi_turn", {"builtin_tools": ["brave_search", "code_interpreter"]}),
    ("mistral_v03", "tool_use", {"tools": TOOLS}),
    ("mistral_v03", "system_multi_turn", {"tools": TOOLS}),
    ("features_control", "multi_turn", {"extra_flag": True}),
]
PLAIN_SETS = ["single_user", "system_user", "multi_turn", "system_multi_turn", "assistant_last",
              "tricky", "empty_content", "bad_alternation"]


def render(env, source, messages, agp, bos, eos, extra):
    kwargs = {"messages": messages, "tools": None, "documents": None, "add_generation_prompt": agp,
              "bos_token": bos, "eos_token": eos}
    kwargs.update(extra)
    try:
        return {"expected": env.from_string(source).render(**kwargs)}
    except TemplateError as e:
        return {"error": str(e), "error_type": type(e).__name__}


def main():
    env = make_env()
    templates = dict(T)
    templates["smollm2_gguf"] = gguf_template()
    os.makedirs(OUT, exist_ok=True)
    for name, source in templates.items():
        with open(os.path.join(OUT, name + ".jinja"), "wb") as f:
            f.write(source.encode("utf-8"))
    cases = []
    grid = [(t, m, {}) for t in templates for m in PLAIN_SETS] + EXTRA_CASES
    for tname, mname, extra in grid:
        bos, eos = TOKENS[tname]
        for agp in (True, False):
            case = {"template": tname, "messages": mname, "add_generation_prompt": agp,
                    "bos_token": bos, "eos_token": eos}
            if extra:
                case["extra"] = extra
            case.update(render(env, templates[tname], M[mname], agp, bos, eos, extra))
            cases.append(case)
    ref = {"generator": "tools/gen_chat_template_fixtures.py", "jinja2_version": jinja2.__version__,
           "templates": sorted(templates), "message_sets": M, "cases": cases}
    with open(os.path.join(OUT, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"wrote {len(templates)} templates and {len(cases)} cases ({errors} expected errors) to {OUT}")


if __name__ == "__main__":
    main()
