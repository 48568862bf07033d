"""Driving the detection page (detect.html) as a visitor does, for its test and for
benchmarks/yolo.py's page row: an image picked with the page's own picker at a letterbox
side typed into its input, then the page's answer (window.lastDetect). The functions take
a playwright Page and run wherever that page's thread is."""

IDLE = "() => document.getElementById('status').dataset.state !== 'busy'"


def wait_idle(page):
    """(state, text) of the page's status line once the worker is done."""
    page.wait_for_function(IDLE)
    return page.eval_on_selector("#status", "e => [e.dataset.state, e.textContent]")


def set_imgsz(page, imgsz):
    """The letterbox side the page uses from now on (None: the model's own)."""
    page.fill("#imgsz", "" if imgsz is None else str(imgsz))


def detect_file(page, path):
    """Pick the image at `path`: ((state, text), the page's detections or None). The
    answer holds "detections" (box x1 y1 x2 y2 in the image's pixels, score, class,
    label), "input" (the letterboxed height and width), "ms" (preprocess, forward,
    postprocess, timed in the worker) and "total_ms" (decode to boxes drawn)."""
    page.evaluate("() => { window.lastDetect = null; }")
    page.set_input_files("#image-file", str(path))
    state = wait_idle(page)
    return state, page.evaluate("() => window.lastDetect")
