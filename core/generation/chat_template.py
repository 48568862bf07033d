"""Chat templates: the Jinja template a model ships in tokenizer_config.json.

Rendering needs jinja2 (an optional dependency); without it a clear error says so.
The environment matches what transformers provides to templates: sandboxed, trimmed
blocks, `raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text.
"""
import json
import os

from ..errors import EmberError, FormatError


class ChatTemplate:
    def __init__(self, template, bos_token="", eos_token="", source="a chat template"):
        self.template = template
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self.source = source
        self._compiled = None

    @classmethod
    def from_tokenizer_config(cls, path, name=None):
        """From tokenizer_config.json (or a model directory holding it, or its
        chat_template.jinja / chat_template.json). `name` picks one of several templates."""
        directory = path if os.path.isdir(path) else os.path.dirname(path)
        config_path = os.path.join(path, "tokenizer_config.json") if os.path.isdir(path) else path
        config = {}
        if os.path.exists(config_path):
            try:
                with open(config_path, encoding="utf-8") as f:
                    config = json.load(f)
            except (OSError, ValueError) as exc:
                raise FormatError(f"{config_path}: cannot read it ({exc})", path=config_path) from None
        template = config.get("chat_template")
        source = f"{config_path} field chat_template"
        jinja_file = os.path.join(directory, "chat_template.jinja")
        json_file = os.path.join(directory, "chat_template.json")
        if template is None and os.path.exists(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                template, source = f.read(), jinja_file
        if template is None and os.path.exists(json_file):
            with open(json_file, encoding="utf-8") as f:
                template, source = json.load(f).get("chat_template"), json_file
        if isinstance(template, list):
            by_name = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            key = name or "default"
            if key not in by_name:
                raise FormatError(f"{source}: no template named {key!r} (have "
                                  f"{', '.join(map(str, by_name))})", path=config_path,
                                  field="chat_template")
            template = by_name[key]
        if not isinstance(template, str) or not template:
            raise FormatError(f"{config_path}: no chat_template (this tokenizer has no chat "
                              "format; pass a plain prompt instead)", path=config_path,
                              field="chat_template")
        return cls(template, _token_text(config.get("bos_token")),
                   _token_text(config.get("eos_token")), source)

    def _template(self):
        if self._compiled is None:
            try:
                import jinja2
                from jinja2.sandbox import ImmutableSandboxedEnvironment
            except ImportError as exc:
                raise EmberError(
                    f"chat template ({self.source}): rendering needs the jinja2 package "
                    f"({exc}); `pip install jinja2`", op="chat_template") from None
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = _strftime_now
            try:
                self._compiled = env.from_string(self.template)
            except jinja2.TemplateError as exc:
                raise FormatError(f"chat template ({self.source}) does not parse: {exc}",
                                  field="chat_template") from None
        return self._compiled

    def render(self, messages, add_generation_prompt=True, **extra):
        """The prompt text for a list of {"role", "content"} messages."""
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m:
                raise EmberError(f"chat template: message {i} must be a dict with 'role' and "
                                 f"'content', got {m!r}", op="chat_template")
        context = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        context.update(extra)
        return self._template().render(messages=list(messages),
                                       add_generation_prompt=add_generation_prompt, **context)


def _token_text(tok):
    if isinstance(tok, dict):   # older configs store AddedToken objects
        return tok.get("content", "")
    return tok or ""


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise(message):
    raise EmberError(f"chat template: {message}", op="chat_template")


def _strftime_now(fmt):
    import datetime
    return datetime.datetime.now().strftime(fmt)
