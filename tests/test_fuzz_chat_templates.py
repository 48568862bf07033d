"""Fuzzing chat templates: templates in the style models ship, mutated in their source
(jinja fragments inserted, cuts, duplicated spans, flipped chars) and inside their
tokenizer_config.json, rendered over ordinary and odd conversations; the only
acceptable outcomes are a rendered prompt or one of ember's own errors, never another
exception or a hang.

EMBER_FUZZ_CASES sets the cases per format (300 by default); run with -s to see the
outcome counts.
"""
import collections
import random

from chat_template_corpus import MESSAGES, ORDINARY
from fuzz_mutator import cases_per_format, mutate_text, mutated_documents
from helpers import require

from ember.errors import EmberError
from ember.generation.chat_template import ChatTemplate

FRAGMENTS = ["{% for i in range(99999) %}", "{% endfor %}", "{{ ", " }}", "{% if ", "{% endif %}", "{% else %}",
             " * 10**9", " ** 99999", "|join", "|join(' ' * 10**8)", ".__class__", "loop(", "|tojson", "|list",
             "{% macro m(x) %}{{ m(x) }}{% endmacro %}{{ m(1) }}", "messages[0]", "messages[-1]['content']",
             "raise_exception('x')", "{% set ns = namespace(a=1) %}", "{% set ns.a = ns.a ~ ns.a %}", " ~ ",
             " + ", " % ", "|replace('', 'xx')", "|center(99999999)", "|indent(9999999)", "{% break %}",
             "{% continue %}", "|batch(3)", "strftime_now('%Y')", "|items", "|dictsort", "{# ", " #}",
             "{% raw %}", "{% endraw %}", "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
             "|int", "|float", "|string", "|length", "'%99999999d' % 1", "'{:99999999}'.format(1)", "()", "[",
             "tools", "|selectattr('role')", "|map(attribute='content')", "|sum", "|first", "|last", "|unique"]

CONVERSATIONS = [
    MESSAGES,
    [],
    [{"role": "user", "content": None}],
    [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]}],
    [{"role": 7, "content": "x"}, {"role": "assistant", "content": "y", "tool_calls": [{"name": "f"}]}],
    [{"role": "user", "content": "{{ 7 * 7 }} {% raw %}"}, {"role": "user", "content": "x" * 5000}],
]


# whole constructs, put between tags so that most mutants still parse and reach rendering
CONSTRUCTS = ["{{ messages[0]['content'] * 10**9 }}", "{{ 'x' ** 99999 }}", "{{ (messages|list) * 99999999 }}",
              "{% for i in range(99999) %}{% for j in range(99999) %}{{ '' }}{% endfor %}{% endfor %}",
              "{% macro m(x) %}{{ m(x) }}{% endmacro %}{{ m(1) }}", "{{ messages[9].content.strip() }}",
              "{{ messages.__class__ }}", "{{ raise_exception('no system role') }}", "{{ tools|tojson(indent=2) }}",
              "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
              "{{ messages|map(attribute='role')|join(', ') }}", "{{ (messages|last).content|upper }}",
              "{{ strftime_now('%d %b %Y') }}", "{{ 1 // 0 }}", "{{ undefined_name.attr }}",
              "{% for m in messages|selectattr('role', 'equalto', 'user') %}{{ loop.index }}{% endfor %}",
              "{{ messages[0]|dictsort }}", "{{ '%s-%d'|format('a', 3) }}", "{{ [1, 2] + messages }}"]


def mutate_template(source, rng):
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.5:
            cuts = [0, len(source)] + [i for i in range(len(source)) if source.startswith(("{%", "{{"), i)]
            i = rng.choice(cuts)
            source = source[:i] + rng.choice(CONSTRUCTS) + source[i:]
        elif r < 0.8:
            i = rng.randrange(len(source) + 1)
            source = source[:i] + rng.choice(FRAGMENTS) + source[i:]
        else:
            source = mutate_text(source, rng)
    return source


def render(template, rng):
    """Render over one conversation picked by rng (ordinary ones most often)."""
    messages = MESSAGES if rng.random() < 0.5 else rng.choice(CONVERSATIONS)
    return template.render(messages, add_generation_prompt=rng.random() < 0.5, tools=[{"name": "f"}])


def _count(outcomes, failures, label, fn):
    try:
        fn()
        outcomes["ok"] += 1
    except EmberError as exc:
        outcomes[type(exc).__name__] += 1
    except Exception as exc:  # what the test exists to find
        outcomes["FOREIGN " + type(exc).__name__] += 1
        failures.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")


def test_mutated_chat_templates_give_only_ember_errors():
    require("jinja2")
    count = cases_per_format()
    rng = random.Random(2024)
    outcomes, failures = collections.Counter(), []
    for i in range(count):
        source = mutate_template(rng.choice(ORDINARY), rng)
        _count(outcomes, failures, f"case {i} {source[:200]!r}",
               lambda source=source: render(ChatTemplate(source, "<s>", "</s>", source="fuzz/chat_template.jinja"), rng))
    print(f"chat templates: {count} cases: {dict(sorted(outcomes.items()))}")
    assert not failures, "\n".join(failures[:5])
    assert outcomes["ok"] > count // 10


def test_mutated_tokenizer_configs_give_only_ember_errors(tmp_path):
    require("jinja2")
    count = cases_per_format()
    seed = {"chat_template": ORDINARY[1], "bos_token": {"content": "<s>"}, "eos_token": "</s>",
            "model_max_length": 2048, "added_tokens_decoder": {"0": {"content": "<unk>", "special": True}}}
    rng = random.Random(77)
    outcomes, failures = collections.Counter(), []
    for i, text in enumerate(mutated_documents(seed, count, seed=77)):
        (tmp_path / "tokenizer_config.json").write_bytes(text.encode("utf-8", "surrogatepass"))
        _count(outcomes, failures, f"case {i} {text[:200]!r}",
               lambda: render(ChatTemplate.from_tokenizer_config(str(tmp_path)), rng))
    print(f"tokenizer_config.json chat templates: {count} cases: {dict(sorted(outcomes.items()))}")
    assert not failures, "\n".join(failures[:5])
    assert outcomes["ok"] > count // 10
