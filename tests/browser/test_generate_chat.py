"""The generation page as a chat with the real SmolLM2-135M-Instruct: the bundle's GGUF is
loaded with progress in MB, its weights stay quantized on the page's WebGPU device, turns
go through the model's chat template, replies stream, Stop works, tokens/s is shown; a
browser without WebGPU gets a message instead of a blank page.

SwiftShader runs the 30 layers slowly: replies are capped at a few tokens."""
import json
import os

import pytest

from demo_pages import open_demo_page, assert_explains_missing_webgpu

MODEL = "smollm2-135m-instruct"
QUESTION = "What is the capital of France?"
ANSWER_TOKENS = 8    # "The capital of France is Paris." is 7 tokens


@pytest.fixture(scope="module")
def chat_page(chromium, server_url, bundle_dir):
    manifest = json.loads(open(os.path.join(str(bundle_dir), "manifest.json")).read())
    if MODEL not in manifest.get("models", {}):
        pytest.fail(f"the bundle has no {MODEL}: build_web fetches it with ember.packaged "
                    f"(see the build's output for why it could not)")
    with open_demo_page(chromium, server_url + "generate.html", 900, "chat") as page:
        yield page


@pytest.fixture(scope="module")
def first_answer(chat_page):
    return chat_page.evaluate("(args) => window.sendChat(args)",
                              {"text": QUESTION, "max_new_tokens": ANSWER_TOKENS})


def test_the_gguf_loads_with_progress_in_megabytes(chat_page):
    log = chat_page.evaluate("() => window.ember.progressLog")
    downloads = [m["text"] for m in log if m["stage"] == "model" and "MB)" in m["text"]]
    assert len(downloads) >= 2, downloads
    assert downloads[-1].endswith("(98.4 / 98.4 MB)"), downloads[-1]   # the whole GGUF
    loaded = chat_page.evaluate("() => window.demoLoaded")
    assert loaded["model"] == MODEL and loaded["chat"] is True
    assert loaded["layers"] == 30 and loaded["vocab"] == 49152
    assert 130e6 < loaded["parameters"] < 140e6             # 134.5M, the quantized ones counted
    print(f"\n[chat page] page open -> model ready {loaded['page_ready_ms'] / 1000:.1f} s "
          f"(boot {loaded['boot_ms']['total'] / 1000:.1f} s; download "
          f"{loaded['seconds']['download']:.1f} s, load {loaded['seconds']['load']:.1f} s, "
          f"warm-up {loaded['seconds']['warm_up']:.1f} s)")


def test_weights_stay_quantized_on_the_device(chat_page):
    kinds = chat_page.run("""
from ember.web import demo_generate, page_gguf
model = demo_generate._state["model"]
layers = [m for _, m in model.named_modules() if isinstance(m, page_gguf.PageQuantLinear)]
[len(layers), sorted({m.ggml_type for m in layers}), sum(m.qweight.nbytes for m in layers),
 type(model.embed_tokens).__name__]
""")
    count, types, nbytes, embedding = kinds
    # q/k/v and gate/up stacked: 4 per layer, and the tied head (Q8_0).
    assert count == 30 * 4 + 1
    assert types == [3, 8]                          # Q4_1 layers, Q8_0 head
    assert 90e6 < nbytes < 100e6                    # the file's bytes, not 4x them in f32
    assert embedding == "PageQ8Embedding"


def test_smollm2_answers_paris_through_the_chat_template(first_answer):
    assert "Paris" in first_answer["text"], first_answer["text"]
    prompt = first_answer["prompt"]
    assert prompt.startswith("<|im_start|>system\n")          # the template's default system turn
    assert prompt.endswith(f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    assert len(first_answer["page_deltas"]) >= 2              # it streamed
    assert first_answer["history"][-1] == {"role": "assistant", "content": first_answer["text"]}


def test_tokens_per_second_is_shown(first_answer, chat_page):
    speed = chat_page.evaluate("() => document.getElementById('speed').textContent")
    assert speed.endswith("tokens/s decoding") and float(speed.split()[0]) > 0, speed
    print(f"\n[chat page] {len(first_answer['prompt_ids'])} prompt tokens, "
          f"{len(first_answer['token_ids'])} new in {first_answer['seconds']:.1f} s, "
          f"decode {first_answer['decode_tokens_per_second']:.2f} tokens/s")


def test_stop_ends_a_long_reply_early_and_the_chat_goes_on(first_answer, chat_page):
    asked = 200
    stopped = chat_page.evaluate("""async (asked) => {
        const run = window.sendChat({text: "Write a long story about a dragon.", max_new_tokens: asked});
        const streaming = () => !document.getElementById("stop").hidden &&
            document.getElementById("output-text").textContent;
        while (!streaming()) await new Promise((resolve) => setTimeout(resolve, 5));
        document.getElementById("stop").click();
        return await run;
    }""", asked)
    assert stopped["stop_reason"] == "stopped"
    assert 0 < len(stopped["token_ids"]) < asked
    # the conversation's KV cache was kept: this turn ran only what follows the first
    # turn's prompt (and reply), not the whole history again
    assert first_answer["cached_prompt_tokens"] == 0
    assert stopped["cached_prompt_tokens"] >= len(first_answer["prompt_ids"])
    assert chat_page.evaluate("() => document.getElementById('stop').hidden")
    assert not chat_page.evaluate("() => document.getElementById('send').disabled")
    # The next turn carries the whole history, the stopped reply included.
    again = chat_page.evaluate("(args) => window.sendChat(args)",
                               {"text": "Thanks!", "max_new_tokens": 2})
    assert again["stop_reason"] in ("length", "stop_token")
    assert len(again["history"]) == 6
    assert QUESTION in again["prompt"] and stopped["text"] in again["prompt"]
    assert again["cached_prompt_tokens"] >= len(stopped["prompt_ids"])


def test_a_browser_without_webgpu_gets_a_clear_message(chromium, server_url):
    assert_explains_missing_webgpu(chromium, server_url + "generate.html", hidden=("#loading",))
