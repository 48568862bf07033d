"""Chat templates: the Jinja template a model ships in tokenizer_config.json.

Rendering needs jinja2 (an optional dependency); without it a clear error says so.
The environment matches what transformers provides to templates: sandboxed, trimmed
blocks, `raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text.
A template is code from the model's files: its rendering is bounded in steps, depth,
value sizes and output (see `template_sandbox`), and every way it can fail (a template
that does not parse, an undefined name, a blocked attribute, a bound passed, an
exception inside it) is one ChatTemplateError or FormatError naming its file.
"""

import json
import os

from ..errors import EmberError, FormatError


class ChatTemplateError(EmberError, ValueError):
    """A chat template failed while rendering; the message names its file."""


class _Refused(Exception):
    """raise_exception() called by the template itself."""


class ChatTemplate:
    def __init__(self, template, bos_token="", eos_token="", source="a chat template"):
        self.template = template
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self.source = source
        self._compiled = None
        self._env = None

    @classmethod
    def from_tokenizer_config(cls, path, name=None):
        """From tokenizer_config.json (or a model directory holding it, or its
        chat_template.jinja / chat_template.json). `name` picks one of several templates."""
        directory = path if os.path.isdir(path) else os.path.dirname(path)
        config_path = os.path.join(path, "tokenizer_config.json") if os.path.isdir(path) else path
        config = {}
        if os.path.isfile(config_path):
            config = _read_json(config_path)
            if not isinstance(config, dict):
                raise FormatError(
                    f"{config_path}: must hold a JSON object, not {type(config).__name__}",
                    path=config_path,
                )
        template = config.get("chat_template")
        source = f"{config_path} field chat_template"
        jinja_file = os.path.join(directory, "chat_template.jinja")
        json_file = os.path.join(directory, "chat_template.json")
        if template is None and os.path.isfile(jinja_file):
            template, source = _read_text(jinja_file), jinja_file
        if template is None and os.path.isfile(json_file):
            doc = _read_json(json_file)
            template = doc.get("chat_template") if isinstance(doc, dict) else None
            source = f"{json_file} field chat_template"
        if isinstance(template, list):
            template = _pick(template, name, source, config_path)
        if template is not None and not isinstance(template, str):
            raise FormatError(
                f"{source}: must be a string or a list of {{name, template}}, not "
                f"{type(template).__name__}",
                path=config_path,
                field="chat_template",
            )
        if not template:
            raise FormatError(
                f"{config_path}: no chat_template (this tokenizer has no chat "
                "format; pass a plain prompt instead)",
                path=config_path,
                field="chat_template",
            )
        return cls(
            template,
            _token_text(config.get("bos_token"), config_path, "bos_token"),
            _token_text(config.get("eos_token"), config_path, "eos_token"),
            source,
        )

    def _template(self):
        if self._compiled is None:
            try:
                import jinja2

                from .template_sandbox import BoundedEnvironment
            except ImportError as exc:
                raise EmberError(
                    f"chat template ({self.source}): rendering needs the jinja2 package "
                    f"({exc}); `pip install jinja2`",
                    op="chat_template",
                ) from None
            env = BoundedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
            )
            env.filters["tojson"] = env._bounded_filter("tojson", _tojson)
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = _strftime_now
            try:
                self._compiled = env.from_string(self.template)
            except jinja2.TemplateSyntaxError as exc:
                raise FormatError(
                    f"chat template ({self.source}) does not parse: {exc} (line {exc.lineno})",
                    field="chat_template",
                ) from None
            except Exception as exc:  # RecursionError from nesting too deep for the compiler, ...
                raise FormatError(
                    f"chat template ({self.source}) cannot be compiled: "
                    f"{type(exc).__name__}: {_short(exc)}",
                    field="chat_template",
                ) from None
            self._env = env
        return self._compiled

    def render(self, messages, add_generation_prompt=True, **extra):
        """The prompt text for a list of {"role", "content"} messages."""
        if not isinstance(messages, (list, tuple)):
            raise ChatTemplateError(
                f"chat template: messages must be a list, not {type(messages).__name__}",
                op="chat_template",
            )
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m:
                raise ChatTemplateError(
                    f"chat template: message {i} must be a dict with 'role' and "
                    f"'content', got {m!r}",
                    op="chat_template",
                )
        template = self._template()
        from .template_sandbox import TemplateLimit, render_bounded

        context = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        context.update(extra)
        try:
            return render_bounded(
                template,
                self._env,
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                **context,
            )
        except _Refused as exc:
            why = f"refused the conversation: {exc}"
        except TemplateLimit as exc:
            why = f"went past a bound: {exc}"
        except RecursionError:
            why = "recursed too deeply"
        except MemoryError:
            why = "ran out of memory"
        except Exception as exc:  # SecurityError, UndefinedError, TypeError ... from template code
            why = f"failed: {type(exc).__name__}: {_short(exc)}"
        raise ChatTemplateError(
            f"chat template ({self.source}) {why}", op="chat_template", source=self.source
        )


def _short(exc, limit=300):
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."


def _read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: cannot read it ({exc})", path=path) from None


def _read_json(path):
    text = _read_text(path)
    try:
        return json.loads(text)
    except RecursionError:
        raise FormatError(f"{path}: the JSON is nested too deeply", path=path) from None
    except ValueError as exc:
        raise FormatError(f"{path}: is not valid JSON ({exc})", path=path) from None


def _pick(templates, name, source, config_path):
    by_name = {}
    for i, t in enumerate(templates):
        if not (
            isinstance(t, dict)
            and isinstance(t.get("name"), str)
            and isinstance(t.get("template"), str)
        ):
            raise FormatError(
                f'{source}[{i}]: must be {{"name": str, "template": str}}',
                path=config_path,
                field="chat_template",
            )
        by_name[t["name"]] = t["template"]
    key = name or "default"
    if key not in by_name:
        raise FormatError(
            f"{source}: no template named {key!r} (have {', '.join(by_name)})",
            path=config_path,
            field="chat_template",
        )
    return by_name[key]


def _token_text(tok, path, field):
    if isinstance(tok, dict):  # older configs store AddedToken objects
        tok = tok.get("content", "")
    if tok is not None and not isinstance(tok, str):
        raise FormatError(
            f"{path}: {field} must be a string, not {type(tok).__name__}", path=path, field=field
        )
    return tok or ""


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message):
    raise _Refused(message)


def _strftime_now(fmt):
    import datetime

    return datetime.datetime.now().strftime(fmt)
