"""A Whisper model directory ready to transcribe: the model, its tokenizer, its special
tokens, the suppression lists from its config, and the log-mel for its mel-bin count.

    t = WhisperTranscriber.from_dir(path, device=dev)
    result = t.transcribe("speech.wav", initial_prompt="Glossary: ember, WebGPU.")
    for seg in result:                       # decoded as it is iterated
        print(seg.start, seg.end, seg.text)
    print(result.language, result.language_probability)   # given, or detected

    for event in t.transcribe_many(["a.wav", "b.wav"]):   # the files' windows batched
        ...
"""

import json
import os

from ..errors import FormatError, InvalidArgument
from ..tokenizers import Tokenizer
from .whisper_decoding import DecodeOptions
from .whisper_load import load_whisper
from .whisper_tokens import WhisperTokens
from .whisper_windows import MAX_BATCH, Transcription
from .whisper_words import WordTimestamps

FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
MULTILINGUAL_VOCAB = 51865  # Whisper's own test: English-only models have 51864 tokens


def _is_multilingual(path, cfg):
    gen = os.path.join(path, "generation_config.json")
    if os.path.isfile(gen):
        with open(gen, encoding="utf-8") as fh:
            flag = json.load(fh).get("is_multilingual")
        if isinstance(flag, bool):
            return flag
    return cfg.vocab_size >= MULTILINGUAL_VOCAB


class WhisperTranscriber:
    def __init__(self, model, tokenizer, tokens):
        self.model = model
        self.tokenizer = tokenizer
        self.tokens = tokens
        self._log_mel = None

    @classmethod
    def from_dir(cls, path, device=None, dtype=None):
        path = os.path.expanduser(os.fspath(path))
        model = load_whisper(path, device=device, dtype=dtype)
        tok_path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(tok_path):
            raise FormatError(
                f"{path}: no tokenizer.json beside the model", path=path, field="tokenizer.json"
            )
        # decoding needs no merges: they are built at the first encode (an initial prompt)
        tokenizer = Tokenizer.from_file(tok_path, defer_merges=True)
        tokens = WhisperTokens.from_tokenizer(
            tokenizer, _is_multilingual(path, model.cfg), tok_path
        )
        return cls(model, tokenizer, tokens)

    def log_mel(self, samples):
        if self._log_mel is None:
            from ..audio.log_mel import LogMel

            self._log_mel = LogMel(self.model.cfg.num_mel_bins, self.model.device)
        return self._log_mel(samples)

    def options(
        self,
        language=None,
        task="transcribe",
        timestamps=True,
        fallback=True,
        beam_size=1,
        condition_on_previous_text=True,
    ):
        """Decoding options from the model's config; `fallback` decodes a failed window again
        at temperatures 0.2 ... 1.0 (openai-whisper's default), else greedy only. Checked
        here, so that a bad option fails before any audio is decoded."""
        cfg = self.model.cfg
        opts = DecodeOptions(
            temperatures=FALLBACK_TEMPERATURES if fallback else (0.0,),
            beam_size=beam_size,
            language=language,
            task=task,
            timestamps=timestamps,
            suppress_tokens=cfg.suppress_tokens,
            suppress_blank=cfg.begin_suppress_tokens or self._blank(),
            condition_on_previous=condition_on_previous_text,
        )
        self.tokens.prompt(opts.language, opts.task, opts.timestamps)
        return opts

    def _blank(self):
        """openai-whisper's SuppressBlank when the config has no list: " " and eot."""
        space = self.tokenizer.encode(" ", add_special_tokens=False).ids
        return (*space, self.tokens.eot)

    def prompt_tokens(self, initial_prompt):
        """The tokens of an initial prompt as openai-whisper makes them: the text stripped
        with one leading space (as it would follow earlier text), or token ids as given.
        The windows' prompt keeps the last max_length // 2 - 1 of them."""
        if initial_prompt is None:
            return []
        if isinstance(initial_prompt, str):
            text = " " + initial_prompt.strip()
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        ids = [int(i) for i in initial_prompt]
        bad = [i for i in ids if not 0 <= i < self.tokens.eot]
        if bad:
            raise InvalidArgument(
                f"Whisper: initial_prompt token {bad[0]} is not a text token (0 to "
                f"{self.tokens.eot - 1})"
            )
        return ids

    def transcribe_many(
        self,
        audios,
        language=None,
        task="transcribe",
        timestamps=True,
        fallback=True,
        beam_size=1,
        initial_prompt=None,
        condition_on_previous_text=True,
        max_batch=MAX_BATCH,
        word_timestamps=False,
    ):
        """The transcription of several files (paths, or 16 kHz mono samples) whose windows
        are decoded together in batches: iterate it for Events (a segment as it is decoded,
        progress); `.files[i]` holds file i's language and segments. With
        `word_timestamps` each segment has `words` (start, end, word, probability). A WAV
        file is read as it is decoded, 30 s at a time (ember.audio.open_samples)."""
        from .. import audio as audio_io

        # checked before any file is opened, so a bad option fails at once
        opts = self.options(
            language, task, timestamps, fallback, beam_size, condition_on_previous_text
        )
        prompt = self.prompt_tokens(initial_prompt)
        samples = []
        try:
            for a in audios:
                samples.append(audio_io.open_samples(a) if isinstance(a, (str, os.PathLike)) else a)
        except BaseException:  # the files opened before the bad one are closed
            for s in samples:
                if hasattr(s, "close"):
                    s.close()
            raise
        words = self._word_timer(opts) if word_timestamps else None
        return Transcription(
            self.model,
            self.tokenizer,
            self.tokens,
            samples,
            self.log_mel,
            opts,
            prompt,
            max_batch,
            words,
        )

    def _word_timer(self, opts):
        """A maker of one file's WordTimestamps for its language (given or detected)."""

        def make(language):
            sot = self.tokens.prompt(language, opts.task, timestamps=True)
            return WordTimestamps(self.model, self.tokenizer, self.tokens, sot, language)

        return make

    def transcribe(
        self,
        audio,
        language=None,
        task="transcribe",
        timestamps=True,
        fallback=True,
        beam_size=1,
        initial_prompt=None,
        condition_on_previous_text=True,
        word_timestamps=False,
    ):
        """The Transcript of `audio` (a file path, or 16 kHz mono samples): its segments,
        decoded as it is iterated, and its language."""
        many = self.transcribe_many(
            [audio],
            language,
            task,
            timestamps,
            fallback,
            beam_size,
            initial_prompt,
            condition_on_previous_text,
            word_timestamps=word_timestamps,
        )
        return Transcript(many)


class Transcript:
    """One file's transcription: iterate it for its segments as they are decoded; its
    language (given, or detected on the first decoded window) and duration after that."""

    def __init__(self, many):
        self._many = many
        self._file = many.files[0]

    def __iter__(self):
        for event in self._many:
            if event.segment is not None:
                yield event.segment

    @property
    def language(self):
        return self._file.language

    @property
    def language_probability(self):
        return self._file.language_probability

    @property
    def duration(self):
        return self._file.duration
