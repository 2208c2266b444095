"""Faces coming into view, at each rung of the quality ladder and per face_selection: how many
published frames show one recognisable before a detection looked at it, and how much of the
picture the cover of what changed (`vcamd.live.tracking.unseen`) took, for how long. Prints a table; asserts
nothing (docs/reliability.md, "A newcomer beside a tracked face").

    .venv/bin/python benchmarks/newcomer_rungs.py                      # every scenario, rung and mode
    .venv/bin/python benchmarks/newcomer_rungs.py --seconds 6 --levels low_res frame_skip --modes all

Scenarios (1280×720, lossless, looped, `--fps`):
- edge: Newton's head at 30 % in every frame; a second real person (the largest face of
  insightface's `t1.jpg`) slides in from past the right edge to 72 % in 0.6 s, stays 1.4 s, goes;
- sudden: the same person there at once at 72 % for 2 s of every 4;
- crowd: a 1280×720 window of crowd_selfie.jpg panned 8 px a frame across it and back (faces
  entering at the edges all the time).

The engine runs in this process (`LiveEngine`, the real SCRFD-500M, the privacy tests' stand-in
swapper that puts a stranger's real face on every face — on the crowd one from insightface's
`t1.jpg`, the privacy tests' stranger being one of the crowd —, on_miss blur) with its level pinned
(`Watchdog.force`, as `vcamd quality LEVEL` does). Each published frame is matched to the camera
frame it was made from (the nearest on a small thumbnail), and checked with MobileFaceNet at every
place the raw camera frame shows a face (other than Newton; crowd faces at least MIN_FACE_PX wide)
by the privacy tests' rule (`leaks.recognised_as`; on the crowd `leaks.Crowd.identified`, see
below). A recognised face is *unseen* when the engine
tracked nothing there in that frame (no detection had looked at it: what `unseen` is for), a
*swapped, identified* where it is a face being swapped (the stranger pasted, and the person still
identified by what a swap leaves: hair, outline, the face's edge), a *bystander* otherwise (tracked,
not swapped: obscured by face_selection, or covered as a miss). Columns: published frames (after
the first swap), frames with a recognisable unseen face, with a recognisable bystander, with a
swapped face still identified,
frames with a recognisable face at least CAMERA_PIXELS of whose box is exactly as the camera gave
it ("camera pixels"), with an `unseen` cover, the covered share of the frame (mean over covered
frames, max), the longest run of covered frames (ms at the camera's rate), and the raw faces of
the clip's frames not judged: those "recognised" even with the frame obscured whole (a face mostly
past the frame's edge, whose aligned crop is mostly border whatever is shown).

On the crowd a cosine alone does not tell: on its 40–140-px faces MobileFaceNet gives a wholly
obscured face a cosine of 0.2–0.6 with the raw face, over the rule's 0.3, and about as much with
other people of the crowd. So there a face counts as recognisable when the published pixels
identify it among the photo's 163 people (closer to its own raw embedding than to any other, and
above 0.3: `leaks.Crowd.identified`): on 413 crowd faces, every raw one and no obscured one
(tests/privacy/test_identification.py). "Camera pixels" counts the recognisable faces published
as the camera showed them.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"
WIDTH, HEIGHT = 1280, 720
MIN_FACE_PX = 40
"""Crowd faces narrower than this are not checked: raw, MobileFaceNet hardly knows them anyway."""
PAN_PX = 8
CAMERA_PIXELS = 0.5
"""A recognised face is shown with camera pixels when at least this share of its box is unchanged (±2)."""


class Recorder:
    """The sink: every published frame, and what the tracker knew for it (read on the loop thread)."""

    def __init__(self) -> None:
        self.engine = None
        self.frames: list[np.ndarray] = []
        self.known: list[list] = []
        self.targets: list[list] = []  # the faces being swapped, per frame
        self.swapping = False
        self.lock = threading.Lock()

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def send(self, frame, stats=None) -> None:
        work = self.engine.frames
        report = work._report
        if not self.swapping and stats and stats["faces"]["swapped"] > 0:
            self.swapping = True
            if hasattr(work, "unseen"):  # (the engine before it: raw frames only)
                work.unseen.tally = type(work.unseen.tally)()  # count from the first swap on
        if self.swapping:
            self.frames.append(frame.copy())
            self.known.append([] if report is None else list(report.faces) + list(report.lost) + list(report.unsure))
            self.targets.append(list(work.targets))


def scenarios(fps: float, leaks, detector):
    """name → camera frames of one loop."""
    def head(image, face_px):
        return leaks.head_cut(image, max(detector.detect(image), key=lambda f: f.area), face_px)

    newton = head(cv2.imread(str(ASSETS / "images" / "newton.png")), HEIGHT / 3)
    newcomer = head(insightface_image("t1.jpg"), HEIGHT / 4)
    second = round(fps)
    slide = [1.12 - 0.4 / (0.6 * fps) * i for i in range(round(0.6 * fps))]
    edge = [None] * second + slide + [0.72] * (2 * second - len(slide)) + [None] * second
    sudden = [None] * second + [0.72] * (2 * second) + [None] * second
    crowd = cv2.imread(str(ASSETS / "images" / "crowd_selfie.jpg"))
    return {
        "edge": leaks.beside_frames(newton, newcomer, edge, (WIDTH, HEIGHT)),
        "sudden": leaks.beside_frames(newton, newcomer, sudden, (WIDTH, HEIGHT)),
        "crowd": [np.ascontiguousarray(crowd[y : y + HEIGHT, x : x + WIDTH]) for x, y in crowd_pan(crowd)],
    }


def insightface_image(name: str) -> np.ndarray:
    """One of the sample photos insightface ships (people in none of the shared assets)."""
    import insightface

    return cv2.imread(str(Path(insightface.__file__).parent / "data" / "images" / name))


def crowd_pan(crowd: np.ndarray) -> list[tuple[int, int]]:
    """Where each frame of the crowd's pan sits in the photo (x, y): across it and back."""
    xs = list(range(0, crowd.shape[1] - WIDTH, PAN_PX))
    y0 = (crowd.shape[0] - HEIGHT) // 2
    return [(x, y0) for x in xs + xs[::-1]]


def small(frame: np.ndarray) -> np.ndarray:
    return cv2.resize(frame, (160, 90), interpolation=cv2.INTER_AREA).astype(np.int16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fps", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=8.0, help="published frames after the first swap, in seconds of the camera")
    parser.add_argument("--levels", nargs="+", default=["full", "no_enhancer", "low_res", "frame_skip"])
    parser.add_argument("--modes", nargs="+", default=["all", "largest"])
    parser.add_argument("--scenarios", nargs="+", default=["edge", "sudden", "crowd"])
    args = parser.parse_args()

    from privacy import leak_checkers  # benchmarks/privacy.py: this folder is on the path

    from vcamd.bench import standins
    from vcamd.common.quality import Level
    from vcamd.config.reading import config_from_dict
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine
    from vcamd.live.loading import build_face_pipeline
    from vcamd.privacy.geometry import near
    from vcamd.privacy.obscure import obscure_frame

    leaks, both, recognizer, (stranger_crop, stranger) = leak_checkers(threads=1)
    clips = {name: frames for name, frames in scenarios(args.fps, leaks, both[1]).items() if name in args.scenarios}

    print("| scenario | level | selection | frames | unseen raw | bystander raw | swapped, identified | camera pixels | covered | share mean | share max | longest cover | not judged |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="vcamd-rungs-") as tmp:
        work = Path(tmp)
        swapper = leaks.build_identity_swapper(work / "stranger.onnx", stranger_crop)
        # The crowd's swapper pastes someone not in it: the privacy tests' stranger is crowd_selfie's
        # largest face, who on the crowd would be pasted onto herself (and her neighbours) and
        # identified there as herself.
        outsider_crop, outsider = leaks.stranger_from(insightface_image("t1.jpg"), both[1], recognizer)
        crowd_swapper = leaks.build_identity_swapper(work / "outsider.onnx", outsider_crop)
        recognizer_standin = standins.build_recognizer(work / "recognizer.onnx")
        for name, frames in clips.items():
            path = leaks.write_clip(work / f"{name}.avi", frames, args.fps)
            thumbs = np.stack([small(f) for f in frames])
            pasted = outsider if name == "crowd" else stranger
            if name == "crowd":  # the people a crowd face is identified among (see the module's doc)
                photo = cv2.imread(str(ASSETS / "images" / "crowd_selfie.jpg"))
                people, pan = leaks.Crowd.of(photo, both, recognizer), crowd_pan(photo)

            def recognised(pixels, p, k, name=name) -> bool:
                """The published `pixels` of camera frame `k` show the raw face `p` recognisably."""
                embedding = recognizer.embed(pixels, p.face)
                if name == "crowd":
                    return people.identified(embedding, p, pan[k], pasted) is not None
                return leaks.recognised_as(embedding, p.embedding, pasted) is not None

            places: dict[int, list] = {}  # camera frame → the faces to check there (raw placements)
            blind = 0
            for i, frame in enumerate(frames):
                found = leaks.placements_in(frame, both, recognizer, MIN_FACE_PX if name == "crowd" else 0.0)
                # Newton (left of the middle) is tracked from the first frame: the newcomer's places only.
                found = found if name == "crowd" else [p for p in found if p.face.box[0] > 0.5 * WIDTH]
                # A place where the frame obscured whole is still "recognised" cannot be judged: a face
                # mostly past the frame's edge, whose aligned crop is mostly the same black border raw
                # or obscured (a crowd face cut by the bottom edge: 0.86 with nothing of it shown).
                covered_whole = frame.copy()
                obscure_frame(covered_whole)
                places[i] = [p for p in found if not recognised(covered_whole, p, i)]
                blind += len(found) - len(places[i])
            for level_name in args.levels:
                for mode in args.modes:
                    cfg = config_from_dict({
                        "models": {"detector": str(ASSETS / "models" / "scrfd_500m_kps.onnx"),
                                   "swapper": str(crowd_swapper if name == "crowd" else swapper),
                                   "recognizer": str(recognizer_standin), "providers": ["cpu"], "threads": 1},
                        "swap": {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True,
                                 "face_selection": mode, "on_miss": "blur"},
                        "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
                    })
                    sink = Recorder()
                    engine = LiveEngine(cfg, source=open_source(str(path), cfg.camera, loop=True),
                                        sink_factory=lambda w, h, fps, s=sink: s, faces=build_face_pipeline(cfg)[0])
                    sink.engine = engine
                    engine.parts.watchdog.force(Level[level_name])
                    wanted = round(args.seconds * args.fps)
                    done = threading.Event()

                    def stop(sink=sink, engine=engine, wanted=wanted, done=done) -> None:
                        while not done.wait(0.05):
                            if len(sink.frames) >= wanted:
                                engine.request_quit()
                                return

                    watcher = threading.Thread(target=stop, daemon=True)
                    watcher.start()
                    engine.run()
                    done.set()
                    unseen_raw = bystander_raw = swapped_raw = camera_raw = 0
                    for frame, known, targets in zip(sink.frames, sink.known, sink.targets):
                        k = int(np.abs(thumbs - small(frame)).mean(axis=(1, 2, 3)).argmin())
                        unchanged = np.abs(frame.astype(np.int16) - frames[k]).max(axis=2) <= 2
                        kinds = set()
                        for p in places[k]:
                            if recognised(frame, p, k):
                                if any(near(p.face, f) for f in targets):
                                    kinds.add("swapped")  # the stranger pasted, the person known by the rest
                                else:
                                    kinds.add("bystander" if any(near(p.face, f) for f in known) else "unseen")
                                x0, y0, x1, y1 = (max(0, int(v)) for v in p.face.box)
                                if unchanged[y0:y1, x0:x1].mean() >= CAMERA_PIXELS:
                                    kinds.add("camera")
                        unseen_raw += "unseen" in kinds
                        bystander_raw += "bystander" in kinds
                        swapped_raw += "swapped" in kinds
                        camera_raw += "camera" in kinds
                    tally = getattr(getattr(engine.frames, "unseen", None), "tally", None)  # None: the engine before it
                    covered, share_max = (tally.covered, tally.share_max) if tally else (0, 0.0)
                    longest = max(tally.runs + [tally.run], default=0) if tally else 0
                    mean = tally.share_sum / tally.covered if tally and tally.covered else 0.0
                    published = len(sink.frames)
                    sink.frames.clear()  # the engine freezes the garbage collector: free what is big now
                    sink.engine = None
                    print(f"| {name} | {level_name} | {mode} | {published} | {unseen_raw} | {bystander_raw} | {swapped_raw} | {camera_raw} | {covered} | "
                          f"{mean:.1%} | {share_max:.1%} | {longest} ({longest / args.fps * 1000:.0f} ms) | {blind} |", flush=True)


if __name__ == "__main__":
    main()
