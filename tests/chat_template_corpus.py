"""Chat templates in the style models ship, and conversations to render them with."""

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🙂"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]

# Templates in the style models ship (Llama 3, ChatML with tools, Mistral, Gemma).
ORDINARY = [
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    "{%- if tools %}{{- '<|im_start|>system\n' }}{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}"
    "{%- endfor %}{{- '<|im_end|>\n' }}{%- endif %}{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}",
    "{%- set ns = namespace(system='') %}{%- for m in messages %}{%- if m.role == 'system' %}"
    "{%- set ns.system = m.content %}{%- elif m.role == 'user' %}{{ '[INST] ' ~ (ns.system ~ '\n\n' if "
    "loop.index == 2 else '') ~ m.content ~ ' [/INST]' }}{%- else %}{{ ' ' ~ m.content ~ eos_token }}"
    "{%- endif %}{%- endfor %}",
    "{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + "
    "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\n'}}{% endif %}{{ '%-6s|%3d' % ('x', 42) }}{{ '{:>8}'.format('y') }}"
    "{{ messages|map(attribute='role')|join(',') }}{{ 'a-b'.split('-')|length }}",
]
