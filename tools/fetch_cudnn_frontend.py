#!/usr/bin/env python3
"""Fetches the cuDNN frontend's C++ headers (NVIDIA's header-only graph API over cuDNN's backend)
for the CUDA build's fused attention: the `nvidia-cudnn-frontend` wheel from PyPI, checked
against its pinned SHA-256, its include/ folder unpacked into DEST/include.

    python3 tools/fetch_cudnn_frontend.py DEST

Run by CMake at configure time when the CUDA backend is built (kernels/CMakeLists.txt); a
failure (no network, no pip) leaves the build without cuDNN attention and says so. The wheel of
one Python version and platform is taken whatever the machine: only its headers are used.
Standard library and pip only.
"""
import hashlib
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

VERSION = "1.32.0"
WHEEL = f"nvidia_cudnn_frontend-{VERSION}-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
SHA256 = "c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dest = pathlib.Path(sys.argv[1])
    stamp = dest / "VERSION"
    if stamp.is_file() and stamp.read_text().strip() == VERSION:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
               "--implementation", "cp", "-d", tmp, f"nvidia-cudnn-frontend=={VERSION}"]
        if subprocess.run(cmd).returncode != 0:
            print(f"fetch_cudnn_frontend: pip download of nvidia-cudnn-frontend=={VERSION} failed",
                  file=sys.stderr)
            return 1
        wheel = pathlib.Path(tmp) / WHEEL
        if not wheel.is_file():
            print(f"fetch_cudnn_frontend: pip did not produce {WHEEL}", file=sys.stderr)
            return 1
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SHA256:
            print(f"fetch_cudnn_frontend: {WHEEL} has SHA-256 {digest}, expected {SHA256}",
                  file=sys.stderr)
            return 1
        staging = pathlib.Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheel) as z:
            members = [m for m in z.namelist() if m.startswith("include/") and ".." not in m]
            if not any(m == "include/cudnn_frontend.h" for m in members):
                print(f"fetch_cudnn_frontend: {WHEEL} holds no include/cudnn_frontend.h",
                      file=sys.stderr)
                return 1
            z.extractall(staging, members)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        shutil.move(str(staging / "include"), str(dest / "include"))
        stamp.write_text(VERSION + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
