"""`ember chat`: an interactive conversation through the model's chat template.

    ember chat                       (SmolLM2-135M-Instruct, fetched on first use)
    ember chat --model ./TinyLlama-Chat --temperature 0.7
    > Hello!
    Hi! How can I help?

Type /reset to start over, /exit (or end of input) to leave. The whole conversation is
re-rendered through the template each turn, so the prompt is what the model was trained on;
the conversation's KV cache is kept between turns, so a turn runs only its new tokens.
"""

import sys

from .generate import add_model_arguments, generation_config, load_llm, report_finish


def add_parser(subparsers):
    p = subparsers.add_parser(
        "chat",
        help="chat with a Llama-family model (its chat template)",
        description=__doc__.split("\n\n")[0],
    )
    add_model_arguments(p)
    p.add_argument("--system", default=None, help="a system message to start with")
    p.set_defaults(func=run)
    return p


def run(args, inp=None, out=None):
    from ..errors import EmberError
    from ..generation import PromptCache, TextGeneration

    inp = inp or sys.stdin
    out = out or sys.stdout
    config = generation_config(args)  # bad settings fail before the model loads
    model, tokenizer, template = load_llm(args)
    if template is None:
        raise EmberError(
            "chat: this model has no chat template (tokenizer_config.json "
            "chat_template, or tokenizer.chat_template in the GGUF file); use "
            "`ember generate` for plain prompts",
            op="chat",
        )
    start = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(start)
    cache = PromptCache(model)
    interactive = inp.isatty()
    while True:
        if interactive:
            out.write("> ")
            out.flush()
        line = inp.readline()
        if not line:
            break
        text = line.rstrip("\n")
        if text.strip() in ("/exit", "/quit"):
            break
        if text.strip() == "/reset":
            messages = list(start)
            cache.reset()
            continue
        if not text.strip():
            continue
        messages.append({"role": "user", "content": text})
        prompt = template.render(messages, add_generation_prompt=True)
        gen = TextGeneration(
            model, tokenizer, prompt, config, add_special_tokens=False, prompt_cache=cache
        )
        for delta in gen:
            out.write(delta)
            out.flush()
        out.write("\n")
        out.flush()
        report_finish(gen, model)
        messages.append({"role": "assistant", "content": gen.text})
    return 0
