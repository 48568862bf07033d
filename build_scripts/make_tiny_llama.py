"""Make the text-generation demo's model: a tiny Llama with a byte-level BPE tokenizer,
randomly initialised and then trained for a few hundred steps on a dozen sentences (so
its greedy text is words, not noise), the same bytes on every run (seeded, one thread),
so the bundle needs no downloaded weights and the repository no binary.

    python build_scripts/make_tiny_llama.py [--out DIR]

Needs torch, transformers and tokenizers (the test/bench extras) at build time only; the
page reads the result with ember alone. build_web.py calls `ensure()`, which makes the
model in ember's cache once and again only when this recipe changes.
"""

import hashlib
import os
import sys
from pathlib import Path

import seeded_models  # beside this file: on sys.path when run or imported by build_web

NAME = "tiny-llama-random"
FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]
SEED = 0
# Small enough for SwiftShader (a page decodes a token in tens of milliseconds), large
# enough to exercise grouped-query attention, rope and a two-layer cache.
MODEL = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "initializer_range": 0.08,
}
VOCAB_SIZE = 512
SPECIAL = "<|endoftext|>"
TRAIN_STEPS = 300
TRAIN_WINDOW = 48

# The tokenizer's training text: a few plain sentences written for this demo.
CORPUS = """\
The small model runs inside the web page, on the graphics card, through WebGPU.
Python in the browser reads the weights, builds the layers and decodes one token at a time.
A language model predicts the next word from the words before it.
The cache keeps the keys and values of earlier tokens, so each step is short.
Once upon a time there was a little fox who lived at the edge of a quiet forest.
Every morning the fox walked to the river, drank the cold water and watched the birds.
One day a storm came over the hills, and the rain fell for three days and three nights.
When the sun returned, the forest was green and bright, and the river was wide and fast.
The fox found a new path across the stones and reached the other side of the valley.
There were apples on the trees, honey in the hollow oak, and friends who shared them.
Numbers, letters and spaces are all bytes to a byte-level tokenizer: 0 1 2 3 4 5 6 7 8 9.
Questions? Answers! Lists: one, two, three; quotes "like this" and (parentheses).
"""


def recipe_hash():
    """What the files depend on: this script and the versions that write them (read from
    the installed metadata: importing torch on every bundle check would cost seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256(Path(__file__).read_bytes())
    for name in ("tokenizers", "transformers", "torch"):
        try:
            h.update(f"{name} {version(name)}\0".encode())
        except PackageNotFoundError:
            raise ImportError(f"{name} is not installed") from None
    return h.hexdigest()[:16]


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines() * 4, trainer)
    return tok


def make(out):
    """Write the model's files into directory `out` (created)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one merge order, every run
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    tok.save(str(out / "tokenizer.json"))
    special = tok.token_to_id(SPECIAL)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), bos_token_id=special, eos_token_id=special, **MODEL
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    train(model, tok.encode(CORPUS).ids)
    model.eval().save_pretrained(str(out), safe_serialization=True)
    return out


def train(model, ids):
    """A few hundred AdamW steps on random windows of the corpus, on one thread so the
    result is the same on every run."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = torch.tensor(ids, dtype=torch.long)
        pick = torch.Generator().manual_seed(SEED)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        model.train()
        for _ in range(TRAIN_STEPS):
            starts = torch.randint(0, len(ids) - TRAIN_WINDOW - 1, (8,), generator=pick)
            batch = torch.stack([data[s : s + TRAIN_WINDOW + 1] for s in starts.tolist()])
            loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1].clone()).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)


_said_missing = []


def ensure(root):
    """The model's directory under `root`, made when missing or made by an older recipe;
    None (with a note) when torch/transformers/tokenizers are not installed."""
    return seeded_models.ensure_made(
        root, "make_tiny_llama", NAME, FILES, recipe_hash, make, _said_missing
    )


def main(argv=None):
    return seeded_models.main(argv, __doc__, FILES, make, ensure)


if __name__ == "__main__":
    sys.exit(main())
