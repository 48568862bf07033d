"""Chat templates from model files are code: rendering is bounded (steps, depth, value
sizes, output) and every failure is one ember error naming the template's file, never a
traceback, a hang or a 10 GB allocation. Ordinary templates render exactly as jinja2's
own sandbox renders them."""
import json

import pytest
from chat_template_corpus import MESSAGES, ORDINARY
from helpers import require

from ember.errors import EmberError, FormatError
from ember.generation.chat_template import ChatTemplate, ChatTemplateError

# (template, what the error says)
HOSTILE = [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{{ 'x' * 10**10 }}", "10,000,000,000 chars"),
    ("{{ ([1] * 100000000)|length }}", "100,000,000"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested more than"),
    ("{% for x in range(10) recursive %}{{ loop(range(10)) }}{% endfor %}", "nested more than"),
    ("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "'~'"),
    ("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "'+'"),
    ("{% set ns = namespace(s='xx') %}{% for i in range(60) %}{% set ns.s = ns.s|replace('x', 'xx') %}"
     "{% endfor %}", "replace"),
    ("{{ 'x'|center(10**9) }}", "argument of 1,000,000,000"),
    ("{{ 'x'.ljust(10**9) }}", "argument of 1,000,000,000"),
    ("{{ [1, 2]|slice(10**9)|list }}", "argument of 1,000,000,000"),
    ("{{ '%100000000s'|format('x') }}", "format width"),
    ("{{ '%100000000s' % 'x' }}", "format width"),
    ("{{ '{:>100000000}'.format('x') }}", "format width"),
    ("{{ 7 ** 100000 }}", "bits"),
    ("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "output passed"),
    ("{{ range(10**6) }}", "Range too big"),
    ("{{ foo.bar.baz }}", "UndefinedError"),
    ("{{ ''.__class__.__mro__ }}", "SecurityError"),
    ("{{ messages.append(1) }}", "SecurityError"),
    ("{{ 1 / 0 }}", "ZeroDivisionError"),
    ("{{ messages[10]['content'] }}", "UndefinedError"),
    ("{{ raise_exception('roles must alternate') }}", "refused the conversation: roles must alternate"),
]


@pytest.mark.parametrize("source, why", HOSTILE)
def test_hostile_templates_end_in_one_clean_error(source, why):
    require("jinja2")
    with pytest.raises(ChatTemplateError) as info:
        ChatTemplate(source, source="model/chat_template.jinja").render(MESSAGES)
    msg = str(info.value)
    assert msg.startswith("chat template (model/chat_template.jinja) ")
    assert why in msg
    assert len(msg) < 600 and "Traceback" not in msg


@pytest.mark.parametrize("source, why", [
    ("{% for %}", "does not parse"),
    ("{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}", "cannot be compiled"),
])
def test_templates_that_do_not_compile_are_format_errors(source, why):
    require("jinja2")
    with pytest.raises(FormatError, match=why) as info:
        ChatTemplate(source, source="model/chat_template.jinja").render(MESSAGES)
    assert "model/chat_template.jinja" in str(info.value)


def test_the_error_names_the_file_the_template_came_from(tmp_path):
    require("jinja2")
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0].nope.deeper }}")
    t = ChatTemplate.from_tokenizer_config(str(tmp_path))
    with pytest.raises(ChatTemplateError, match=str(tmp_path / "chat_template.jinja")):
        t.render(MESSAGES)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 1 / 0 }}"}))
    t = ChatTemplate.from_tokenizer_config(str(tmp_path))
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json field chat_template"):
        t.render(MESSAGES)


@pytest.mark.parametrize("config, why", [
    ({"chat_template": 5}, "must be a string"),
    ({"chat_template": [{"name": ["x"], "template": "t"}]}, r"chat_template\[0\]"),
    ({"chat_template": [{"name": "a", "template": "t"}]}, "no template named 'default'"),
    ({"chat_template": "{{ x }}", "bos_token": 7}, "bos_token must be a string"),
    ({"chat_template": "{{ x }}", "eos_token": {"content": ["x"]}}, "eos_token must be a string"),
    ([1, 2], "must hold a JSON object"),
])
def test_malformed_tokenizer_config_is_a_format_error(tmp_path, config, why):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(FormatError, match=why):
        ChatTemplate.from_tokenizer_config(str(tmp_path))


def test_deeply_nested_config_json_is_a_format_error(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(FormatError, match="nested too deeply"):
        ChatTemplate.from_tokenizer_config(str(tmp_path))


def test_messages_must_be_a_list_of_role_dicts():
    with pytest.raises(EmberError, match="must be a list"):
        ChatTemplate("{{ messages }}").render("hello")
    with pytest.raises(EmberError, match="message 1 must be a dict"):
        ChatTemplate("{{ messages }}").render([{"role": "user"}, "hi"])


@pytest.mark.parametrize("source", ORDINARY)
def test_ordinary_templates_render_as_jinja2s_sandbox_does(source):
    require("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    tools = [{"name": "get_weather", "parameters": {"city": "Zürich"}}]
    for gen in (True, False):
        want = env.from_string(source).render(messages=MESSAGES, add_generation_prompt=gen, tools=tools,
                                              bos_token="<s>", eos_token="</s>")
        got = ChatTemplate(source, "<s>", "</s>").render(MESSAGES, add_generation_prompt=gen, tools=tools)
        assert got == want and len(got) > 20
