"""A small byte-level BPE trained with the reference `tokenizers` library, for tests that
build a tiny model and its tokenizer with transformers/tokenizers and compare ember
against them."""
from helpers import require


def train_byte_level_bpe(corpus, vocab_size):
    """A reference Tokenizer (byte-level BPE with specials <s>, </s>) trained on `corpus`;
    skips (fails under CI=true) where `tokenizers` is missing."""
    tokenizers = require("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    return tok
