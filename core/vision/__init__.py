"""Images for vision models: reading (PNG by ember, JPEG through optional Pillow),
Ultralytics-style letterboxing, NMS, and the detect pipeline of ember.models.yolo."""

from .detect import detect
from .images import as_image, read_image
from .letterbox import Letterbox, letterbox
from .nms import Detection

__all__ = ["detect", "read_image", "as_image", "letterbox", "Letterbox", "Detection"]
