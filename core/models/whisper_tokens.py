"""Whisper's special tokens: where they sit in a vocabulary, found by name in
tokenizer.json or laid out by Whisper's scheme (text tokens, <|endoftext|>,
<|startoftranscript|>, one token per language, <|translate|>, <|transcribe|>,
<|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, then 1501 timestamps
<|0.00|> ... <|30.00|> in steps of 0.02 s)."""

from dataclasses import dataclass, field

from ..errors import FormatError, InvalidArgument

N_TIMESTAMPS = 1501
SECONDS_PER_TIMESTAMP = 0.02


@dataclass(frozen=True)
class WhisperTokens:
    eot: int
    sot: int
    translate: int
    transcribe: int
    sot_lm: int
    sot_prev: int
    no_speech: int
    no_timestamps: int
    languages: dict = field(default_factory=dict)  # "en" -> token id
    # English-only models (.en) have the language tokens too but are never prompted with
    # them; Whisper tells them apart by vocabulary size (multilingual: 51865 and more)
    multilingual: bool = False

    @property
    def timestamp_begin(self):
        return self.no_timestamps + 1

    def specials(self):
        """The control tokens a transcript never samples (openai-whisper suppresses them)."""
        return (
            self.sot,
            self.translate,
            self.transcribe,
            self.sot_lm,
            self.sot_prev,
            self.no_speech,
        )

    def prompt(self, language=None, task="transcribe", timestamps=True):
        """The start-of-transcript sequence: sot [language task] [notimestamps]."""
        ids = [self.sot]
        if task not in ("transcribe", "translate"):
            raise InvalidArgument(
                f"Whisper: task must be transcribe or translate, got {task!r}", field="task"
            )
        if self.multilingual:
            lang = language or "en"
            if lang not in self.languages:
                raise InvalidArgument(
                    f"Whisper: unknown language {lang!r}; this model knows "
                    f"{', '.join(sorted(self.languages))}",
                    field="language",
                )
            ids += [
                self.languages[lang],
                self.transcribe if task == "transcribe" else self.translate,
            ]
        elif language not in (None, "en"):
            raise InvalidArgument(
                f"Whisper: this model is English-only: it transcribes English ('en'), not "
                f"{language!r}; use a multilingual model (e.g. whisper-base) for other "
                "languages, or leave the language out",
                field="language",
            )
        elif task == "translate":
            raise InvalidArgument(
                "Whisper: this model is English-only: it cannot translate; use a multilingual "
                "model (e.g. whisper-base)",
                field="task",
            )
        if not timestamps:
            ids.append(self.no_timestamps)
        return ids

    @classmethod
    def by_layout(cls, eot, languages=(), multilingual=None):
        """Whisper's layout after `eot` with `languages` (codes, in order)."""
        langs = {code: eot + 2 + i for i, code in enumerate(languages)}
        after = eot + 2 + len(langs)
        multi = len(langs) > 1 if multilingual is None else multilingual
        return cls(
            eot, eot + 1, after, after + 1, after + 2, after + 3, after + 4, after + 5, langs, multi
        )

    @classmethod
    def from_tokenizer(cls, tok, multilingual, path="tokenizer.json"):
        def find(*names):
            for name in names:
                i = tok.token_to_id(name)
                if i is not None:
                    return i
            raise FormatError(
                f"{path}: no {names[0]} token: not a Whisper tokenizer", path=path, field=names[0]
            )

        ids = {
            "eot": find("<|endoftext|>"),
            "sot": find("<|startoftranscript|>"),
            "translate": find("<|translate|>"),
            "transcribe": find("<|transcribe|>"),
            "sot_lm": find("<|startoflm|>"),
            "sot_prev": find("<|startofprev|>"),
            "no_speech": find("<|nospeech|>", "<|nocaptions|>"),
            "no_timestamps": find("<|notimestamps|>"),
        }
        langs = {}
        for i in range(ids["sot"] + 1, ids["translate"]):
            name = tok.id_to_token(i) or ""
            if name.startswith("<|") and name.endswith("|>"):
                langs[name[2:-2]] = i
        return cls(**ids, languages=langs, multilingual=multilingual)
