"""ember.vision.draw: each detection's outline, a label band reading "<label> <score>"
in its class's colour (above the box, inside it at the image's top edge, shifted left at
the right edge), a pose model's visible keypoints; nothing drawn past the image."""

import numpy as np
import pytest

from ember.vision.draw import PALETTE, draw_detections, ink_on
from ember.vision.font import GLYPHS, HEIGHT, text_mask
from ember.vision.nms import Detection


def _black(h, w):
    return np.zeros((h, w, 3), np.uint8)


def _is(pixels, colour):
    return (pixels == np.asarray(colour, np.uint8)).all(-1)


def test_the_label_band_sits_above_the_box_and_reads_its_text():
    d = Detection((20.0, 30.0, 60.0, 70.0), 0.5, 1, "A")
    out = draw_detections(_black(100, 100), [d])
    colour = PALETTE[1]
    # "A 0.50": 6 glyphs of 5 columns with 5 blank ones between, 1 pixel of band around
    band = out[30 - (HEIGHT + 2) : 30, 20 : 20 + 6 * 6 - 1 + 2]
    ink = _is(band, ink_on(colour))
    assert (ink | _is(band, colour)).all()
    assert out[: 30 - (HEIGHT + 2)].max() == 0  # nothing above the band
    np.testing.assert_array_equal(ink[1:-1, 1:6], GLYPHS["A"])  # the first glyph, padded by 1
    np.testing.assert_array_equal(ink[1:-1, 1:-1], text_mask("A 0.50"))
    assert _is(out[30, 20:61], colour).all() and _is(out[70, 20:61], colour).all()


def test_a_different_score_or_label_draws_different_text():
    base = Detection((20.0, 30.0, 60.0, 70.0), 0.5, 0, "dog")
    a = draw_detections(_black(100, 100), [base])
    b = draw_detections(_black(100, 100), [Detection(base.box, 0.75, 0, "dog")])
    c = draw_detections(_black(100, 100), [Detection(base.box, 0.5, 0, "cat")])
    assert (a != b).any() and (a != c).any()
    assert np.array_equal(a, draw_detections(_black(100, 100), [base]))


def test_at_the_top_and_right_edges_the_label_stays_inside_the_image():
    d = Detection((80.0, 1.0, 99.0, 40.0), 0.9, 0, "person")
    out = draw_detections(_black(60, 100), [d])
    width = len("person 0.90") * 6 - 1 + 2
    band = out[1 : 1 + HEIGHT + 2, 100 - width : 100]  # inside the box, pushed left
    assert (_is(band, PALETTE[0]) | _is(band, ink_on(PALETTE[0]))).all()
    assert _is(band, ink_on(PALETTE[0])).any()


def test_no_label_hides_another_detection_s_outline():
    below = Detection((10.0, 40.0, 50.0, 80.0), 0.6, 2, "b")
    above = Detection((5.0, 45.0, 90.0, 90.0), 0.9, 3, "a")  # its band covers below's corner
    out = draw_detections(_black(100, 100), [below, above])
    assert _is(out[40, 10], PALETTE[2]) and _is(out[80, 50], PALETTE[2])


def test_visible_keypoints_are_drawn_the_others_left_out():
    kps = ((50.0, 50.0, 0.9), (10.0, 90.0, 0.2), (30.0, 70.0))
    d = Detection((0.0, 20.0, 99.0, 99.0), 0.8, 0, "p", kps)
    out = draw_detections(_black(100, 100), [d], labels=False)
    dot = 255 - PALETTE[0]
    assert _is(out[50, 50], dot) and _is(out[70, 30], dot)
    assert out[90, 10].max() == 0


@pytest.mark.parametrize("shape", [(1, 1), (3, 200), (200, 3)])
def test_tiny_and_thin_images_keep_their_shape(shape):
    d = Detection((0.0, 0.0, float(shape[1]), float(shape[0])), 0.5, 4, "thing", ((0.0, 0.0),))
    out = draw_detections(_black(*shape), [d])
    assert out.shape == (*shape, 3) and out.any()


def test_lower_case_is_drawn_as_capitals_and_the_unknown_as_a_question_mark():
    assert np.array_equal(text_mask("normal"), text_mask("NORMAL"))
    assert np.array_equal(text_mask("\u20ac"), text_mask("?"))
    assert text_mask("ab", scale=3).shape == (HEIGHT * 3, (2 * 6 - 1) * 3)
