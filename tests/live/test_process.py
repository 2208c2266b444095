"""The allocator setting the engine makes for its process (`vcamd.live.process.keep_frames_in_the_heap`).

Measured in a fresh Python process: how a process allocated before the test decides how glibc
places large buffers (it moves its threshold after the first large free), which is what hid the
cost from `vcamd bench` — it writes its clips in the same process before it plays them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vcamd.bench.clips import write_sliding_clip
from vcamd.live.process import FRAME_HEAP_BYTES, keep_frames_in_the_heap

PAGE = 4096

PLAY_AND_COUNT = """
import json, resource, sys
from pathlib import Path
from vcamd.live.process import keep_frames_in_the_heap
from vcamd.live.capture.sources import VideoFileCamera

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

camera = VideoFileCamera(Path(sys.argv[1]), loop=True)
camera.open()
per_frame = {}
for phase in ("default", "kept"):
    if phase == "kept":
        assert keep_frames_in_the_heap()
    frames = [camera.read() for _ in range(3)]  # settle: the first frames of a phase map what they need
    before = faults()
    for _ in range(20):
        frames.append(camera.read())
        frames.pop(0)  # a few frames alive at a time, as in the engine (slot, loop, publisher)
    per_frame[phase] = (faults() - before) / 20
camera.close()
print(json.dumps({"faults_per_frame": per_frame, "frame_bytes": frames[-1].nbytes}))
"""


@pytest.fixture(scope="module")
def clip_1080p(tmp_path_factory, newton) -> Path:
    path = tmp_path_factory.mktemp("heap") / "clip_1080p.avi"
    return write_sliding_clip(path, newton, size=(1920, 1080), fps=60.0, frames=30, face_scale=0.66, step_px=4)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator settings")
def test_decoded_1080p_frames_reuse_the_pages_of_the_frames_before_them(clip_1080p) -> None:
    if not keep_frames_in_the_heap():  # this process's allocator is not glibc's (musl)
        pytest.skip("not glibc: the allocator keeps its own ways")
    proc = subprocess.run([sys.executable, "-c", PLAY_AND_COUNT, str(clip_1080p)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    pages = result["frame_bytes"] / PAGE
    assert pages > 1500 and result["frame_bytes"] < FRAME_HEAP_BYTES
    print(f"page faults per 1080p frame: {result['faults_per_frame']} ({pages:.0f} pages a frame)")
    # Mapped afresh, a frame faults in each of its 1 519 pages; kept in the heap, next to none.
    assert result["faults_per_frame"]["kept"] < pages / 20, result

