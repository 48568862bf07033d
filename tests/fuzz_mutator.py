"""A seeded mutator of JSON documents and texts, for the fuzz tests: each case is one
valid seed changed in one to three places, in its structure (a value replaced by a
hostile one, a key dropped or added, a list grown) or in its bytes (a cut, a flipped
byte, a deep nest)."""
import copy
import json
import os
import random

HOSTILE_VALUES = [None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63, -(2 ** 63), 10 ** 30, 0.5, -1e308, 1e308,
                  float("nan"), float("inf"), "", "x", "[UNK]", "##", "\u2581", "a b", "<0x41>", " " * 3,
                  "\ud800", "💥" * 50, "(a+)+$", "[", "\\", "$A", "Right", "Left", "Isolated", "Sequence",
                  [], [0], ["a", "b"], [["a", 0.0]], [1, 2, 3], {}, {"type": "Sequence"}, {"String": "a"},
                  {"Regex": "a|b"}, {"Fixed": 3}, {"id": "A", "type_id": 0}, [[[[[]]]]]]


def cases_per_format(default=300):
    """EMBER_FUZZ_CASES overrides the number of cases per format (thousands in a long run)."""
    return int(os.environ.get("EMBER_FUZZ_CASES", default))


def _random_path(doc, rng):
    """A random walk down from the root, stopping at each level with probability 1/4, so
    every section (not only the thousands of vocabulary entries) gets its share."""
    path, node = (), doc
    while isinstance(node, (dict, list)) and node:
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path, node = path + (key,), node[key]
        if rng.random() < 0.25:
            break
    return path


def _parent(doc, path):
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node


def _hostile(rng):
    v = rng.choice(HOSTILE_VALUES)
    return copy.deepcopy(v)


def mutate_tree(doc, rng):
    """A deep copy of doc with one structural change."""
    doc = copy.deepcopy(doc)
    path = _random_path(doc, rng)
    if not path:
        return _hostile(rng)
    parent, key = _parent(doc, path), path[-1]
    op = rng.randrange(7)
    if op == 0:
        parent[key] = _hostile(rng)
    elif op == 1 and isinstance(parent, dict):
        del parent[key]
    elif op == 1:
        parent.pop(key)
    elif op == 2 and isinstance(parent, dict):
        parent[rng.choice(["type", "vocab", "merges", "unk_token", "pattern", "id", "ids", "tokens",
                           "content", "special", "max_length", "strategy", "length"])] = _hostile(rng)
    elif op == 3 and isinstance(parent[key], str):
        s = parent[key]
        i = rng.randrange(len(s) + 1)
        parent[key] = s[:i] + rng.choice(["", "x", " ", "\u2581", "##", "é", "\x00", "(", "*"]) + s[i + 1:]
    elif op == 4 and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
        parent[key] = rng.choice([-parent[key], parent[key] + 1, parent[key] * 1000, 0, -1, 2 ** 40])
    elif op == 5 and isinstance(parent[key], list) and parent[key]:
        parent[key].append(copy.deepcopy(rng.choice(parent[key])))
    else:
        other = _parent(doc, _random_path(doc, rng) or path)
        if isinstance(other, dict) and other:
            parent[key] = copy.deepcopy(rng.choice(list(other.values())))
        else:
            parent[key] = _hostile(rng)
    return doc


def mutate_text(text, rng):
    """text with one byte-level change: a cut, a flipped char, a deep nest or a duplicate span."""
    op = rng.randrange(4)
    i = rng.randrange(len(text) + 1)
    if op == 0:
        return text[:i]
    if op == 1 and text:
        i = min(i, len(text) - 1)
        return text[:i] + chr(rng.randrange(32, 127)) + text[i + 1:]
    if op == 2:
        depth = rng.choice([100, 5000, 200000])
        return text[:i] + "[" * depth + "]" * depth + text[i:]
    j = min(len(text), i + rng.randrange(1, 40))
    return text[:j] + text[i:j] + text[j:]


def mutated_documents(seed_doc, count, seed):
    """`count` JSON texts, each the seed with 1-3 mutations (one in eight at the byte level)."""
    rng = random.Random(seed)
    for _ in range(count):
        doc = seed_doc
        for _ in range(rng.randint(1, 3)):
            doc = mutate_tree(doc, rng)
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.125:
            text = mutate_text(text, rng)
        yield text
