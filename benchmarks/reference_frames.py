"""Check decoded frames against torchcodec's reference frames and the ffmpeg command line.

torchcodec's test suite keeps frames that the ``ffmpeg`` command line wrote, as
``.pt`` tensors beside the videos in its ``test/resources`` folder:

* ``VIDEO.streamS.frameNNNNNN.pt``: frame ``N`` of stream ``S``, by
  ``ffmpeg -i VIDEO -map 0:S -vf select=eq(n\\,N)``. The file's default stream
  (``default_stream_index`` in torchcodec's ``test/utils.py``) is read by
  ``read_clip`` with no ``stream=``; the others with ``stream=S``.
* ``VIDEO.timeT.pt``: the frame ``ffmpeg -ss T -i VIDEO -frames:v 1`` wrote, the
  first whose timestamp is ``T`` or later. ``read_frames_at`` gives the frame
  played at a time, so it is asked for the middle of that frame's display
  interval, found in ``VIDEO.streamS.all_frames_info.json`` (ffprobe's list).
* Each frame reference of a stream with such a list is also read by time, at
  the middle of its frame's display interval.

A video of the folder without reference frames (torchcodec's 10-bit files, its
full-range file) is checked against the ``ffmpeg`` command line run here, when
one is found (``--ffmpeg``, else ``ffmpeg`` on the path, else imageio-ffmpeg's).
Every frame read through the project must equal its reference. Frames of more
than 8 bits a sample may differ by up to ``--high-depth-levels`` (4). The script
reads the original files, without remuxing. It needs neither torch nor torchcodec:
a ``.pt`` file is a zip holding a pickle and the tensor's bytes. It prints one row
per video, stream and way of reading. A second table checks ``probe``'s size and
``frame_count`` against the references. The script exits 1 if any check fails.
See docs/video/decoding.md.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import math
import pickle
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import av
import numpy as np

from parallel_loader.video import frame_count, probe, read_clip, read_frames_at

from ._common import add_out_argument, format_table, make_parser, write_report

__all__ = ["load_pt", "main"]

FRAME_REF = re.compile(r"^(?P<video>.+?)\.stream(?P<stream>\d+)\.frame(?P<frame>\d+)\.pt$")
TIME_REF = re.compile(r"^(?P<video>.+?)\.time(?P<time>\d+(?:\.\d+)?)\.pt$")
VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".webm", ".avi")


@dataclasses.dataclass
class Row:
    """The comparison of one video's frames, read one way, with their references."""

    asset: str
    stream: str
    read_as: str
    reference: str
    bound: int  # the largest difference, in levels, that passes
    checked: int = 0
    exact: int = 0
    max_diff: int = 0
    worst_psnr: float = math.inf
    failures: list[str] = dataclasses.field(default_factory=list)

    def add(self, what: str, got: np.ndarray, want: np.ndarray) -> None:
        """Compare one decoded frame (or a clip) ``got`` with its reference ``want``."""
        self.checked += len(got) if got.ndim == 4 else 1
        if got.shape != want.shape:
            self.failures.append(f"{what}: shape {got.shape}, reference {want.shape}")
            return
        largest = 0
        for g, w in zip(got.reshape(-1, *want.shape[-3:]), want.reshape(-1, *want.shape[-3:]), strict=True):
            diff = np.abs(g.astype(np.int16) - w.astype(np.int16))
            self.exact += int(not diff.any())
            largest = max(largest, int(diff.max()))
            mse = float(np.mean(diff.astype(np.float64) ** 2))
            self.worst_psnr = min(self.worst_psnr, math.inf if mse == 0 else 10 * math.log10(255**2 / mse))
        self.max_diff = max(self.max_diff, largest)
        if largest > self.bound:
            self.failures.append(f"{what}: differs by up to {largest} levels (bound {self.bound})")

    def raised(self, what: str, error: Exception, count: int = 1) -> None:
        """Record that reading ``what`` raised ``error`` instead of giving frames."""
        self.checked += count
        self.failures.append(f"{what}: raised {type(error).__name__}: {error}")

    @property
    def passed(self) -> bool:
        return self.checked > 0 and not self.failures

    def cells(self) -> list[Any]:
        psnr = "inf" if math.isinf(self.worst_psnr) else f"{self.worst_psnr:.1f}"
        result = "pass" if self.passed else "FAIL"
        counts = [self.checked, self.exact, self.max_diff, psnr, self.bound, result]
        return [self.asset, self.stream, self.read_as, self.reference, *counts]


def load_pt(path: Path) -> np.ndarray:
    """The tensor a ``torch.save`` zip file at ``path`` holds, as a numpy array, without torch.

    Raises:
        ValueError: the file holds something other than one tensor of a known type.
    """
    with zipfile.ZipFile(path) as archive:
        pickled = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
        folder = pickled[: -len("data.pkl")]
        dtypes = {"ByteStorage": np.uint8, "FloatStorage": np.float32, "UInt8Storage": np.uint8}

        class _Unpickler(pickle.Unpickler):
            def find_class(self, module: str, name: str) -> Any:
                if module == "torch._utils" and name == "_rebuild_tensor_v2":
                    return _rebuild_tensor
                if module == "torch" and name in dtypes:
                    return dtypes[name]
                if module == "collections" and name == "OrderedDict":
                    return dict
                raise ValueError(f"{path}: unexpected {module}.{name} in a tensor file")

            def persistent_load(self, pid: Any) -> np.ndarray:
                _, dtype, key, _location, _numel = pid
                return np.frombuffer(archive.read(f"{folder}data/{key}"), dtype=dtype)

        tensor = _Unpickler(archive.open(pickled)).load()
    if not isinstance(tensor, np.ndarray):
        raise ValueError(f"{path} holds a {type(tensor).__name__}, not one tensor")
    return tensor


def _rebuild_tensor(storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any):
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], size, tuple(s * item for s in stride))
    return np.ascontiguousarray(view)


def default_streams(utils: Path) -> dict[str, int]:
    """Each video's default video stream, from the ``TestVideo(...)`` calls of torchcodec's ``test/utils.py``.

    The file is parsed, not run. A video it does not describe has no entry.
    """
    if not utils.is_file():
        return {}
    found = {}
    for node in ast.walk(ast.parse(utils.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "TestVideo":
            kw = {k.arg: k.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            if "filename" in kw and "default_stream_index" in kw:
                found[kw["filename"].value] = kw["default_stream_index"].value
    return found


def frame_refs(folder: Path) -> dict[tuple[str, int], list[tuple[int, Path]]]:
    """The ``VIDEO.streamS.frameN.pt`` files of ``folder``: ``(frame, path)`` by ``(video, stream)``, in order."""
    groups: dict[tuple[str, int], list[tuple[int, Path]]] = {}
    for ref in sorted(folder.glob("*.pt")):
        if m := FRAME_REF.match(ref.name):
            groups.setdefault((m["video"], int(m["stream"])), []).append((int(m["frame"]), ref))
    return dict(sorted(groups.items()))


def check_frame_refs(folder: Path, defaults: dict[str, int]) -> list[Row]:
    """One row per video and stream: every ``VIDEO.streamS.frameN.pt`` through ``read_clip``."""
    rows = []
    for (video, stream), refs in frame_refs(folder).items():
        default = defaults.get(video) == stream
        read_as = "read_clip()" if default else f"read_clip(stream={stream})"
        row = Row(video, _stream_label(stream, default), read_as, "torchcodec", bound=0)
        for frame, ref in refs:
            try:
                got = read_clip(folder / video, frame, 1, stream=None if default else stream)
            except Exception as error:  # a failure to read is a result to report
                row.raised(f"frame {frame}", error)
                continue
            row.add(f"frame {frame}", got[0], load_pt(ref))
        rows.append(row)
    return rows


def check_headers(folder: Path, defaults: dict[str, int]) -> list[list[Any]]:
    """Per video and stream with reference frames: ``probe``'s size and ``frame_count``, each against the references.

    The size is the reference frames'; the count is that of the stream's
    ``all_frames_info.json``, where there is one. A row is ``[asset, stream, call, got, expected, result]``.
    """
    rows = []
    for (video, stream), refs in frame_refs(folder).items():
        default = defaults.get(video) == stream
        choice, label = (None, "") if default else (stream, f"stream={stream}")
        size = tuple(load_pt(refs[0][1]).shape[:2])
        asks: list[tuple[str, Callable[[], Any], Any]] = [
            (f"probe({label}) (height, width)", partial(_probed_size, folder / video, choice), size)
        ]
        if (frames := _frame_list(folder, video, stream)) is not None:
            ask = partial(frame_count, folder / video, stream=choice)
            asks.append((f"frame_count({label}) frames", ask, len(frames)))
        for call, ask, want in asks:
            try:
                got = ask()
            except Exception as error:  # a failure to read is a result to report
                got = f"raised {type(error).__name__}: {error}"
            result = "pass" if got == want else "FAIL"
            rows.append([video, _stream_label(stream, default), call, got, want, result])
    return rows


def _stream_label(stream: int, default: bool) -> str:
    return f"{stream} (default)" if default else str(stream)


def _probed_size(path: Path, stream: int | None) -> tuple[int, int]:
    info = probe(path, stream=stream)
    return (info.height, info.width)


def check_time_refs(folder: Path, defaults: dict[str, int]) -> tuple[list[Row], list[str]]:
    """Rows of frames asked for by time, through ``read_frames_at``; and notes on references left unchecked.

    A stream with a frame list (``all_frames_info.json``) gets a row of its frame
    references, each asked for at the middle of its frame's display interval.
    A video's ``VIDEO.timeT.pt`` references get a row too (see the module docstring).
    """
    rows, notes = [], []
    for (video, stream), refs in frame_refs(folder).items():
        if (frames := _frame_list(folder, video, stream)) is not None:
            asks = [(f"frame {n}", _mid_time(frames, n), ref) for n, ref in refs]
            rows.append(_read_at(folder / video, stream, defaults.get(video) == stream, "frames' mid-times", asks))
    groups: dict[str, list[tuple[float, Path]]] = {}
    for ref in sorted(folder.glob("*.pt")):
        if m := TIME_REF.match(ref.name):
            groups.setdefault(m["video"], []).append((float(m["time"]), ref))
    for video, refs in sorted(groups.items()):
        stream = defaults.get(video)
        frames = None if stream is None else _frame_list(folder, video, stream)
        if stream is None or frames is None:
            notes.append(f"{video}: {len(refs)} time references not checked: no default stream's frame list")
            continue
        asks = []
        for seconds, ref in sorted(refs):
            n = next((i for i, f in enumerate(frames) if float(f["pts_time"]) >= seconds), len(frames) - 1)
            asks.append((f"-ss {seconds:g}: frame {n}", _mid_time(frames, n), ref))
        rows.append(_read_at(folder / video, stream, True, "-ss times", asks))
    return rows, notes


def _frame_list(folder: Path, video: str, stream: int) -> list[dict[str, str]] | None:
    listing = folder / f"{video}.stream{stream}.all_frames_info.json"
    return json.loads(listing.read_text(encoding="utf-8")) if listing.is_file() else None


def _mid_time(frames: list[dict[str, str]], n: int) -> float:
    """The middle of frame ``n``'s display interval, by the frame list's timestamps (given to 6 decimals)."""
    return float(frames[n]["pts_time"]) + float(frames[n]["duration_time"]) / 2


def _read_at(path: Path, stream: int, default: bool, kind: str, asks: list[tuple[str, float, Path]]) -> Row:
    """A row of ``read_frames_at`` at each ask's time against its reference."""
    read_as = f"read_frames_at({'' if default else f'stream={stream}'}), {kind}"
    row = Row(path.name, _stream_label(stream, default), read_as, "torchcodec", bound=0)
    for what, seconds, ref in asks:
        what = f"{what}, asked at {seconds:.6f} s"
        try:
            got = read_frames_at(path, [seconds], stream=None if default else stream)
        except Exception as error:  # a failure to read is a result to report
            row.raised(what, error)
            continue
        row.add(what, got[0], load_pt(ref))
    return row


def check_command_line(folder: Path, defaults: dict[str, int], ffmpeg: str, frames: int, levels: int) -> list[Row]:
    """One row per video of ``folder`` without reference frames: its first ``frames`` against ``ffmpeg``'s."""
    referenced = {video for video, _ in frame_refs(folder)}
    videos = sorted(p for p in folder.iterdir() if p.suffix in VIDEO_SUFFIXES and p.name not in referenced)
    if not videos:
        return []
    version = subprocess.run([ffmpeg, "-version"], capture_output=True, text=True, check=True).stdout.split()[2]
    rows = []
    for path in videos:
        stream = defaults.get(path.name)
        with av.open(str(path)) as container:
            chosen = container.streams[stream] if stream is not None else container.streams.best("video")
            if chosen is None or chosen.type != "video":
                continue
            depth = max(c.bits for c in chosen.codec_context.format.components)
            height, width = chosen.codec_context.height, chosen.codec_context.width
            index = chosen.index  # read before closing: PyAV's stream is freed with its container
        bound = levels if depth > 8 else 0
        name = f"{_stream_label(index, stream is not None)}, {depth}-bit"
        row = Row(path.name, name, "read_clip()", f"ffmpeg {version}", bound=bound)
        command = [ffmpeg, "-v", "error", "-i", str(path), "-map", f"0:{index}", "-frames:v", str(frames)]
        raw = subprocess.run([*command, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True)
        want = np.frombuffer(raw.stdout, np.uint8).reshape(-1, height, width, 3)
        try:
            got = read_clip(path, 0, len(want))
        except Exception as error:
            row.raised(f"frames 0-{len(want) - 1}", error, len(want))
        else:
            row.add(f"frames 0-{len(want) - 1}", got, want)
        rows.append(row)
    return rows


def find_ffmpeg(given: str | None) -> str | None:
    """The ``ffmpeg`` command: ``given``, else the one on the path, else imageio-ffmpeg's, else None."""
    if given:
        return given
    if found := shutil.which("ffmpeg"):
        return found
    if importlib.util.find_spec("imageio_ffmpeg") is not None:
        from imageio_ffmpeg import get_ffmpeg_exe

        return get_ffmpeg_exe()
    return None


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__, "python -m benchmarks.reference_frames")
    parser.add_argument("--torchcodec-resources", type=Path, required=True, help="torchcodec's test/resources folder")
    parser.add_argument("--ffmpeg", help="the ffmpeg command for videos without reference frames")
    parser.add_argument("--frames", type=int, default=30, help="frames per video checked against ffmpeg")
    parser.add_argument("--high-depth-levels", type=int, default=4, help="the bound for frames of over 8 bits")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    folder = args.torchcodec_resources
    if not folder.is_dir():
        parser.error(f"--torchcodec-resources {folder}: no such folder")
    defaults = default_streams(folder.parent / "utils.py")
    rows = check_frame_refs(folder, defaults)
    time_rows, notes = check_time_refs(folder, defaults)
    rows += time_rows
    ffmpeg = find_ffmpeg(args.ffmpeg)
    if ffmpeg is None:
        notes.append("no ffmpeg command (--ffmpeg, the path, imageio-ffmpeg): videos without references not checked")
    else:
        rows += check_command_line(folder, defaults, ffmpeg, args.frames, args.high_depth_levels)
    headers = ["asset", "stream", "read as", "reference", "frames", "bit-exact", "max diff", "PSNR dB, worst"]
    print(format_table([*headers, "bound", "result"], [row.cells() for row in rows]))
    headers_checked = check_headers(folder, defaults)
    print(format_table(["asset", "stream", "call", "got", "expected", "result"], headers_checked))
    for row in rows:
        for failure in row.failures:
            print(f"FAIL {row.asset} stream {row.stream}, {row.read_as}: {failure}")
    for note in notes:
        print(f"note: {note}")
    if not rows:
        print(f"no reference frame found in {folder}: nothing checked")
    passed = bool(rows) and all(row.passed for row in rows) and all(r[-1] == "pass" for r in headers_checked)
    frames_ok = bool(rows) and all(row.passed for row in rows)
    print(f"{sum(r.checked for r in rows)} frames checked: {'all passed' if frames_ok else 'FAILED'}")
    print(f"{len(headers_checked)} header facts checked: {sum(r[-1] == 'pass' for r in headers_checked)} right")
    results = [dataclasses.asdict(row) for row in rows]
    fields = {"rows": results, "headers": headers_checked, "notes": notes, "passed": passed}
    return write_report(args, "reference_frames", fields)


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)
