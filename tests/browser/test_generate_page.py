"""The generation page with the bundle's tiny Llama (`?model=tiny-llama-random`), loaded
onto the page's WebGPU device, streams the same greedy tokens as ember's native backend (and transformers) for
the same files, one delta at a time, while the page keeps painting frames."""
import json
import os

import pytest

from helpers import require
from demo_pages import open_demo_page
from page_harness import load_build_web

PROMPT = "Once upon a time"
NEW_TOKENS = 16   # SwiftShader is slow: few tokens are enough to see the stream


@pytest.fixture(scope="module")
def model_dir(bundle_dir):
    path = os.path.join(str(bundle_dir), "models", "tiny-llama-random")
    manifest = json.loads(open(os.path.join(str(bundle_dir), "manifest.json")).read())
    if "tiny-llama-random" not in manifest.get("models", {}):
        require("transformers")   # the build makes the model with it; fails under CI=true
        pytest.fail("the bundle has no tiny-llama-random although transformers is installed")
    return path


@pytest.fixture(scope="module")
def generate_page(chromium, server_url, model_dir):
    url = server_url + "generate.html?model=tiny-llama-random"
    with open_demo_page(chromium, url, 760, "generation") as page:
        yield page


@pytest.fixture(scope="module")
def greedy_in_page(generate_page):
    """One greedy generation through the page's own entry point (what its button calls)."""
    return generate_page.evaluate(
        "(args) => window.generateText(args)",
        {"prompt": PROMPT, "max_new_tokens": NEW_TOKENS, "ignore_eos": True})


def native_greedy(model_dir, device):
    from ember.generation import generate
    from ember.models.llama import LlamaForCausalLM
    from ember.tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(model_dir, device=device)
    prompt_ids = tokenizer.encode(PROMPT).ids
    return prompt_ids, generate(model, prompt_ids, max_new_tokens=NEW_TOKENS, stop_token_ids=())


def test_page_generates_the_native_greedy_tokens(greedy_in_page, model_dir, reference_device):
    prompt_ids, expected = native_greedy(model_dir, reference_device)
    assert greedy_in_page["prompt_ids"] == prompt_ids
    assert greedy_in_page["token_ids"] == expected
    assert len(expected) == NEW_TOKENS


def test_page_generates_what_transformers_generates(greedy_in_page, model_dir):
    torch = require("torch")
    transformers = require("transformers")
    hf_tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(model_dir, "tokenizer.json"))
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir).eval()
    ids = torch.tensor([hf_tok(PROMPT)["input_ids"]])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    assert greedy_in_page["token_ids"] == out[0, ids.shape[1]:].tolist()
    assert greedy_in_page["text"] == hf_tok.decode(greedy_in_page["token_ids"])


def test_text_arrives_as_a_stream_while_the_page_stays_responsive(greedy_in_page,
                                                                   generate_page,
                                                                   artifacts_dir):
    deltas = greedy_in_page["page_deltas"]
    assert len(deltas) >= 4, deltas
    assert "".join(d["text"] for d in deltas) == greedy_in_page["text"]
    # Each delta reached the page while generation was still running, in order, with the
    # token count growing ...
    times = [d["at_ms"] for d in deltas]
    assert times == sorted(times) and times[0] < times[-1]
    assert [d["tokens"] for d in deltas] == sorted(d["tokens"] for d in deltas)
    assert deltas[0]["tokens"] < NEW_TOKENS
    # ... and the main thread painted frames in between (its rAF counter advanced).
    assert deltas[-1]["heartbeat"] > deltas[0]["heartbeat"]
    shown = generate_page.evaluate("() => document.getElementById('output-text').textContent")
    assert shown == greedy_in_page["text"]
    speed = generate_page.evaluate("() => document.getElementById('speed').textContent")
    assert "tokens/s" in speed
    generate_page.do(lambda: generate_page.page.screenshot(
        path=os.path.join(artifacts_dir, "generate-demo.png"), full_page=True))


def test_load_progress_covers_download_upload_and_warm_up(generate_page):
    log = generate_page.evaluate("() => window.ember.progressLog")
    model = [m for m in log if m["stage"] == "model"]
    fractions = [m["fraction"] for m in model]
    assert len(fractions) >= 3 and fractions == sorted(fractions)
    assert any("MB)" in m["text"] for m in model)                # the weights' bytes
    assert any("GPU" in m["text"] for m in model)                # the upload
    assert log[-1]["stage"] == "ready"
    loaded = generate_page.evaluate("() => window.demoLoaded")
    assert loaded["layers"] == 2 and loaded["parameters"] > 0
    print(f"\n[generate page] page open -> model ready {loaded['page_ready_ms'] / 1000:.1f} s "
          f"(boot {loaded['boot_ms']['total'] / 1000:.1f} s; model download "
          f"{loaded['seconds']['download']:.2f} s, load {loaded['seconds']['load']:.2f} s, "
          f"warm-up {loaded['seconds']['warm_up']:.2f} s)")


def test_seeded_sampling_in_the_page_repeats(generate_page):
    args = {"prompt": "The fox", "max_new_tokens": 8, "temperature": 0.9, "top_k": 20,
            "seed": 7, "ignore_eos": True}
    first = generate_page.evaluate("(args) => window.generateText(args)", args)
    again = generate_page.evaluate("(args) => window.generateText(args)", args)
    assert first["token_ids"] == again["token_ids"]
    assert len(first["token_ids"]) == 8


def test_stop_ends_a_long_generation_early(generate_page):
    out = generate_page.evaluate("""async () => {
        const run = window.generateText({prompt: "The fox", max_new_tokens: 200, ignore_eos: true});
        // Running (Stop shown, the last run's text cleared) and some new text arrived:
        const streaming = () => !document.getElementById("stop").hidden &&
            document.getElementById("output-text").textContent;
        while (!streaming()) await new Promise((resolve) => setTimeout(resolve, 5));
        document.getElementById("stop").click();
        return await run;
    }""")
    assert out["stop_reason"] == "stopped"
    assert 0 < len(out["token_ids"]) < 200
    assert generate_page.evaluate("() => document.getElementById('stop').hidden")


def test_generation_reads_back_only_through_the_async_api(generate_page):
    """No hidden blocking readback in the decoding loop (it would need JSPI, and stall the
    worker's event loop): the driver's sync `read` is counted while the demo generates,
    then once on purpose to show the count works."""
    counts = generate_page.run("""
from ember.backends.webgpu import browser
from ember.web import demo_generate
_sync_reads = []
_read = browser.BrowserDriver.read
def _counting_read(self, *args):
    _sync_reads.append(1)
    return _read(self, *args)
browser.BrowserDriver.read = _counting_read
try:
    await demo_generate.generate("The fox", 4, ignore_eos=True)
    during = len(_sync_reads)
    ember.tensor([1.0], device=dev).tolist()
finally:
    browser.BrowserDriver.read = _read
[during, len(_sync_reads)]
""")
    assert counts == [0, 1]
