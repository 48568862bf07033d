"""A Whisper model directory ready to transcribe: the model, its tokenizer, its special
tokens, the suppression lists from its config, and the log-mel for its mel-bin count.

    t = WhisperTranscriber.from_dir(path, device=dev)
    for seg in t.transcribe("speech.wav"):
        print(seg.start, seg.end, seg.text)
"""

import json
import os

from ..errors import FormatError
from ..tokenizers import Tokenizer
from .whisper_decoding import DecodeOptions, transcribe
from .whisper_load import load_whisper
from .whisper_tokens import WhisperTokens
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
        tokenizer = Tokenizer.from_file(tok_path)
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
        self, language=None, task="transcribe", timestamps=True, fallback=True, beam_size=1
    ):
        """Decoding options from the model's config; `fallback` decodes a failed window again
        at temperatures 0.2 ... 1.0 (openai-whisper's default), else greedy only."""
        cfg = self.model.cfg
        return DecodeOptions(
            temperatures=FALLBACK_TEMPERATURES if fallback else (0.0,),
            beam_size=beam_size,
            language=language,
            task=task,
            timestamps=timestamps,
            suppress_tokens=cfg.suppress_tokens,
            suppress_blank=cfg.begin_suppress_tokens or self._blank(),
        )

    def _blank(self):
        """openai-whisper's SuppressBlank when the config has no list: " " and eot."""
        space = self.tokenizer.encode(" ", add_special_tokens=False).ids
        return (*space, self.tokens.eot)

    def transcribe(
        self,
        audio,
        language=None,
        task="transcribe",
        timestamps=True,
        fallback=True,
        beam_size=1,
        word_timestamps=False,
    ):
        """Segments of `audio` (a file path, or 16 kHz mono samples), yielded as decoded;
        with `word_timestamps` each has `words` (start, end, word, probability). A WAV file
        is read as it is decoded, 30 s at a time (ember.audio.open_samples)."""
        from .. import audio as audio_io

        samples = audio_io.open_samples(audio) if isinstance(audio, (str, os.PathLike)) else audio
        # checked before any window is decoded, so a bad option fails at once
        opts = self.options(language, task, timestamps, fallback, beam_size)
        self.tokens.prompt(opts.language, opts.task, opts.timestamps)
        words = None
        if word_timestamps:
            sot = self.tokens.prompt(opts.language, opts.task, timestamps=True)
            words = WordTimestamps(self.model, self.tokenizer, self.tokens, sot, opts.language)
        try:
            yield from transcribe(
                self.model, self.tokenizer, self.tokens, samples, self.log_mel, opts, words
            )
        finally:  # a streamed file is closed even when the caller stops early
            if hasattr(samples, "close"):
                samples.close()
