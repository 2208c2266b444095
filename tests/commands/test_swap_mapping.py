"""`vcamd swap` with `[[swap.map]]`, on real people: a video of three real people (Newton and two
of the Solvay conference), two of them mapped to two other real people's faces, the third not
mapped. Every output frame is checked with both real SCRFD detectors and the real MobileFaceNet:
a mapped person shows their own source or nothing recognisable — never their own face, never the
other mapping's source; the unmapped person is obscured (`[swap] others`). The stand-in swapper
returns the source face itself (`support.mapping`), so which source a face shows is measurable."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import tomli_w
from support.cli import one_clear_line, run_vcamd
from support.mapping import Case, check_frames, clip_frames, make_case, on_grey, present

from vcamd.bench import leaks
from vcamd.bench.families import build_family_swapper
from vcamd.faces.specs import family_named

FRAMES = 60


@pytest.fixture(scope="module")
def checkers(assets: Path):
    return leaks.load_checkers(assets / "models")


@pytest.fixture(scope="module")
def case(tmp_path_factory, assets: Path, checkers) -> Case:
    both, recognizer = checkers
    return make_case(tmp_path_factory.mktemp("mapping"), assets, both[1], recognizer)


def _config(folder: Path, case: Case, **swap) -> Path:
    data = {**case.config, "swap": {**case.config["swap"], **swap}}
    path = folder / "config.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


def test_a_video_of_three_people_two_mapped_shows_each_their_own_source(case: Case, checkers, tmp_path: Path):
    both, recognizer = checkers
    raw = clip_frames(case.heads[:3], FRAMES)
    clip = leaks.write_clip(tmp_path / "three.avi", raw, 30.0)
    out = tmp_path / "out.avi"
    done = run_vcamd("swap", "--config", _config(tmp_path, case), "--input", clip, "--output", out, timeout=300)
    assert done.returncode == 0, done.stderr
    published = leaks.read_video(out)
    assert len(published) == FRAMES
    failures, right = check_frames(published, both, recognizer, case, raw)
    mapped_shown = sum(present(k, i, FRAMES) for k in (0, 1) for i in range(FRAMES))
    print(f"\nmapping offline: {FRAMES} frames, {right} of {mapped_shown} mapped faces shown with their own source, {len(failures)} failures")
    assert failures == [], "\n".join(failures[:20])
    assert right >= 0.9 * mapped_shown, f"only {right} of {mapped_shown} mapped faces shown with their source"


def test_a_photo_of_the_three_with_others_shown(case: Case, checkers, tmp_path: Path):
    """`others = "show"`: the unmapped person is shown as they are; the mapped two each get their source."""
    both, recognizer = checkers
    photo = clip_frames(case.heads[:3], 30)[-1]
    source, out = tmp_path / "three.png", tmp_path / "out.png"
    cv2.imwrite(str(source), photo)
    done = run_vcamd("swap", "--config", _config(tmp_path, case, others="show"), "--input", source, "--output", out, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "swapped 2 face(s)" in done.stdout
    result = cv2.imread(str(out))
    shown = {}
    for face in both[0].detect(result):
        cosines = case.people @ recognizer.embed(result, face)
        shown[int((face.box[0] + face.box[2]) / 2 // (result.shape[1] / 3))] = int(np.argmax(cosines))
    assert shown == {0: 3, 1: 4, 2: 2}, shown  # person 0 → 3, person 1 → 4, person 2 as they are


@pytest.mark.parametrize("bad", ["no face", "several faces", "not an image", "not a .dfm model"])
def test_a_bad_mapping_photo_is_one_clear_line_naming_the_entry(bad: str, case: Case, assets: Path, tmp_path: Path):
    photo = tmp_path / ("bad.dfm" if bad == "not a .dfm model" else "bad.png")
    if bad == "no face":
        cv2.imwrite(str(photo), np.full((300, 300, 3), 128, np.uint8))
    elif bad == "several faces":
        cv2.imwrite(str(photo), np.hstack([on_grey(case.heads[0]), on_grey(cv2.resize(case.heads[2], case.heads[0].shape[1::-1]))]))
    else:
        photo.write_text("not a photo", encoding="utf-8")
    entries = [dict(e) for e in case.config["swap"]["map"]]
    entries[1]["source"] = str(photo)
    config = _config(tmp_path, case, map=entries)
    done = run_vcamd("swap", "--config", config, "--input", case.photos[0], "--output", tmp_path / "out.png", timeout=120)
    fix = {"no face": "clearly visible", "several faces": "crop the photo", "not an image": "JPEG or PNG",
           "not a .dfm model": "bad.dfm"}[bad]
    one_clear_line(done, "[[swap.map]] entry 2", "source", str(photo), fix)


def test_a_person_mapped_to_a_deepfacelab_model(case: Case, checkers, tmp_path: Path):
    """`source` may be a `.dfm` (its own trained face): person 1's faces are swapped by that model
    — here a stand-in of the exact signature that returns person 4's real face — person 0's by the
    engine's swapper to their photo, person 2 shown as they are."""
    both, recognizer = checkers
    spec = family_named("someone.dfm")
    assert spec is not None
    fourth = on_grey(case.heads[4])
    face_crop, _ = spec.crop.align(fourth, max(both[1].detect(fourth), key=lambda f: f.area).kps)
    model = build_family_swapper(tmp_path / "person4.dfm", spec, stranger=face_crop)
    entries = [dict(e) for e in case.config["swap"]["map"]]
    entries[1]["source"] = str(model)
    photo = clip_frames(case.heads[:3], 30)[-1]
    source, out = tmp_path / "three.png", tmp_path / "out.png"
    cv2.imwrite(str(source), photo)
    done = run_vcamd("swap", "--config", _config(tmp_path, case, others="show", map=entries), "--input", source, "--output", out,
                     timeout=120)
    assert done.returncode == 0, done.stderr
    result = cv2.imread(str(out))
    shown = {}
    for face in both[0].detect(result):
        cosines = case.people @ recognizer.embed(result, face)
        shown[int((face.box[0] + face.box[2]) / 2 // (result.shape[1] / 3))] = int(np.argmax(cosines))
    assert shown == {0: 3, 1: 4, 2: 2}, shown



def test_photo_sources_with_a_deepfacelab_swapper_are_refused(case: Case, tmp_path: Path):
    """A `.dfm` as `[models] swapper` swaps its own trained face in: it cannot show a mapped photo,
    so a photo source is refused (naming the entry), never swapped to the model's face."""
    spec = family_named("someone.dfm")
    assert spec is not None
    model = build_family_swapper(tmp_path / "someone.dfm", spec)
    data = {**case.config, "models": {**case.config["models"], "swapper": str(model)}}
    config = tmp_path / "config.toml"
    config.write_text(tomli_w.dumps(data), encoding="utf-8")
    done = run_vcamd("swap", "--config", config, "--input", case.photos[0], "--output", tmp_path / "out.png", timeout=120)
    one_clear_line(done, "[[swap.map]] entry 1", "own trained face")
