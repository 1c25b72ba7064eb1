"""oxccl: a drop-in, ABI-compatible replacement for NVIDIA NCCL 2.28 (libnccl.so.2), in Rust.

This package carries the library, ``oxccl/lib/libnccl.so.2`` (soname libnccl.so.2), plus its
header, and nothing that needs a GPU to install or import. Importing ``oxccl`` does not load the
library. Programs use it in place of NVIDIA's NCCL when it is preloaded, since the dynamic loader
then satisfies every need for libnccl.so.2 (PyTorch's included) with it::

    oxccl-run torchrun --nproc-per-node 4 train.py        # the console script
    LD_PRELOAD=$(oxccl-run --print-path) python train.py   # by hand
    subprocess.run(cmd, env=oxccl.preload_env())           # from Python
"""
import os as _os
from typing import Dict, Mapping, Optional

from ._version import NCCL_VERSION, __version__

__all__ = ["__version__", "NCCL_VERSION", "lib_dir", "library_path", "include_dir", "preload_env"]

_HERE = _os.path.dirname(_os.path.abspath(__file__))


def lib_dir() -> str:
    """The directory holding libnccl.so.2 (for LD_LIBRARY_PATH or -L)."""
    return _os.path.join(_HERE, "lib")


def library_path() -> str:
    """The absolute path of the library, ``.../oxccl/lib/libnccl.so.2`` (a real file)."""
    path = _os.path.join(lib_dir(), "libnccl.so.2")
    if not _os.path.isfile(path):
        raise FileNotFoundError(f"oxccl: {path} is missing; reinstall the oxccl wheel")
    return path


def include_dir() -> str:
    """The directory holding nccl.h (which itself needs CUDA's include directory)."""
    return _os.path.join(_HERE, "include")


def preload_env(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """A copy of ``env`` (default ``os.environ``) with the library first in LD_PRELOAD.

    Existing LD_PRELOAD entries are kept, after it. Raises ValueError if the library's path holds
    ':' or ' ', which LD_PRELOAD cannot express (the loader splits at both and has no quoting).
    """
    lib = library_path()
    if ":" in lib or " " in lib:
        raise ValueError(f"oxccl: cannot preload a path containing ':' or ' ': {lib}")
    out = dict(_os.environ if env is None else env)
    old = out.get("LD_PRELOAD", "")
    out["LD_PRELOAD"] = f"{lib}:{old}" if old else lib
    return out
