"""Placeholder frames: dark, with readable centred text, built once per size and never mutated."""

from __future__ import annotations

import numpy as np
import pytest

from vcamd.live.output.placeholder import offline_frame


@pytest.mark.parametrize(("width", "height"), [(1280, 720), (640, 480), (160, 120)])
def test_dark_frame_with_centred_text(width, height):
    frame = offline_frame(width, height)
    assert frame.shape == (height, width, 3) and frame.dtype == np.uint8
    gray = frame.mean(axis=2)
    assert gray[: height // 5].max() < 60 and gray[-height // 5 :].max() < 60  # calm and dark around the text
    band = gray[height // 3 : 2 * height // 3]
    assert band.std() > 10  # text in the middle: the centre is not uniform
    ys, xs = np.nonzero(gray > 120)  # the light text pixels
    assert len(xs) > 0.003 * width * height
    centre_x = (xs.min() + xs.max()) / 2
    centre_y = (ys.min() + ys.max()) / 2
    assert abs(centre_x - width / 2) < 0.03 * width and abs(centre_y - height / 2) < 0.05 * height
    assert xs.max() - xs.min() < width  # the message fits in the frame


def test_a_custom_message_shows():
    offline = offline_frame(640, 360)
    custom = offline_frame(640, 360, "Camera unplugged")
    assert np.count_nonzero(np.any(custom != offline, axis=2)) > 500


def test_built_once_and_read_only():
    first = offline_frame(320, 240)
    assert offline_frame(320, 240) is first  # cached: publishing it costs nothing per frame
    assert offline_frame(322, 240) is not first
    with pytest.raises(ValueError):
        first[0, 0] = 255  # a caller drawing on it would corrupt every later placeholder
    assert first.flags.c_contiguous


@pytest.mark.parametrize("make", [offline_frame])
@pytest.mark.parametrize(("width", "height"), [(1, 1), (8, 8), (2, 300), (300, 2), (31, 17), (64, 48)])
def test_any_size_from_one_pixel_up_is_a_calm_frame(make, width, height):
    # A tiny camera mode once crashed the daemon here (a ValueError below 16×16, exit 1).
    frame = make(width, height)
    assert frame.shape == (height, width, 3) and frame.dtype == np.uint8
    assert frame.mean(axis=2).max() < 60  # too small for readable text: the dark background alone


@pytest.mark.parametrize(("width", "height"), [(200, 150), (320, 40)])
def test_the_message_shrinks_to_fit_a_small_frame(width, height):
    gray = offline_frame(width, height).mean(axis=2)
    ys, xs = np.nonzero(gray > 120)
    assert len(xs) > 0  # still says something
    assert xs.min() > 0 and xs.max() < width - 1 and ys.min() > 0 and ys.max() < height - 1  # and all of it fits


def test_no_pixels_is_a_programming_error():
    with pytest.raises(ValueError, match="at least 1×1"):
        offline_frame(0, 8)
