"""Keep a video's sound when `vcamd swap` rewrites its pictures.

OpenCV writes video only. After the swapped frames are written, `mux_audio` builds the final file
with PyAV (FFmpeg): the swapped video packets are copied as they are, and the input's audio tracks
are copied too when the output container can hold their codec (AAC into .mp4, for example), or
re-encoded to one it can (Opus from a .webm becomes AAC in an .mp4). Nothing is decoded that
does not have to be, so the pictures are bit-identical to what OpenCV wrote.

Packets of the two inputs are merged in time order, so the output is interleaved the way players
expect (video and the audio that goes with it close together in the file).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from vcamd.common.errors import VcamdError

AUDIO_CODEC_FOR_CONTAINER: dict[str, Literal["aac", "mp3"]] = {".mp4": "aac", ".m4v": "aac", ".mov": "aac", ".avi": "mp3"}
"""What audio is re-encoded to when the input's codec cannot go into the output container as is."""

AVI_COPYABLE = {"mp3", "mp2", "ac3", "pcm_s16le", "pcm_u8"}
"""AVI takes other codecs (FFmpeg will put AAC in one), but its headers then miscount the frames."""


@dataclass(frozen=True, slots=True)
class AudioKept:
    """What happened to the input's audio tracks."""

    tracks: int
    """Audio tracks in the output (0 when the input had none)."""
    reencoded_to: str | None = None
    """The codec the audio was re-encoded to, or None when every track was copied untouched."""


def audio_track_count(path: Path) -> int:
    """How many audio tracks a media file has (0 for a file PyAV cannot open: the video path reports that)."""
    import av

    try:
        with av.open(str(path)) as container:
            return len(container.streams.audio)
    except (av.FFmpegError, OSError):
        return 0


def mux_audio(video_only: Path, audio_from: Path, output: Path) -> AudioKept:
    """Write `output` with the video track of `video_only` and every audio track of `audio_from`.

    Raises VcamdError naming the reason when FFmpeg cannot do it (the caller decides whether the
    video is still worth keeping without sound).
    """
    import av

    suffix = output.suffix.lower()
    try:
        with av.open(str(video_only)) as pictures, av.open(str(audio_from)) as sound, av.open(str(output), "w") as out:
            video_in = pictures.streams.video[0]
            video_out = out.add_stream_from_template(video_in)
            feeds: list[Iterator[tuple[float, int, Any]]] = [_copied(pictures.demux(video_in), video_out, 0)]
            reencoded: str | None = None
            for order, audio_in in enumerate(sound.streams.audio, start=1):
                if _copyable(audio_in.codec_context.name, suffix, out.supported_codecs):
                    feeds.append(_copied(sound.demux(audio_in), out.add_stream_from_template(audio_in), order))
                else:
                    codec = AUDIO_CODEC_FOR_CONTAINER.get(suffix, "aac")
                    reencoded = codec
                    audio_out = out.add_stream(codec, rate=audio_in.codec_context.sample_rate or 48000)
                    audio_out.layout = audio_in.codec_context.layout.name
                    feeds.append(_reencoded(sound.demux(audio_in), audio_out, order))
            # heapq.merge keeps the output in time order across tracks; `order` breaks ties stably.
            for _, _, packet in heapq.merge(*feeds, key=lambda item: (item[0], item[1])):
                out.mux(packet)
            return AudioKept(tracks=len(sound.streams.audio), reencoded_to=reencoded)
    except (av.FFmpegError, ValueError) as exc:
        output.unlink(missing_ok=True)
        raise VcamdError(
            f"cannot copy the audio of {audio_from} into {output.name}: {' '.join(str(exc).split())}",
            fix="write the video as .mp4 (which takes AAC, MP3 and Opus audio), or convert the input's audio with ffmpeg",
        ) from None


def _copyable(codec: str, suffix: str, supported: set[str]) -> bool:
    return codec in AVI_COPYABLE if suffix == ".avi" else codec in supported


def _seconds(value: int | None, time_base: Fraction | None) -> float:
    return float(value * time_base) if value is not None and time_base is not None else 0.0


def _copied(packets: Iterator[Any], stream: Any, order: int) -> Iterator[tuple[float, int, Any]]:
    for packet in packets:
        if packet.dts is None:  # the demuxer's empty end-of-stream packet
            continue
        when = _seconds(packet.dts, packet.time_base)
        packet.stream = stream
        yield when, order, packet


def _reencoded(packets: Iterator[Any], stream: Any, order: int) -> Iterator[tuple[float, int, Any]]:
    # The encoder converts sample format, layout and frame size itself (PyAV resamples on encode).
    for packet in packets:
        for frame in packet.decode():
            frame.pts = None  # let the encoder number its own samples
            for out_packet in stream.encode(frame):
                yield _seconds(out_packet.pts, out_packet.time_base), order, out_packet
    for out_packet in stream.encode(None):
        yield _seconds(out_packet.pts, out_packet.time_base), order, out_packet
