"""The ``oxccl-run`` console script (also ``python -m oxccl``)."""
import os
import sys
from typing import List, Optional

from . import __version__, library_path, preload_env

USAGE = """\
usage: oxccl-run [--print-path | --version | --help] [--] COMMAND [ARG...]
Runs COMMAND with oxccl's libnccl.so.2 first in LD_PRELOAD (existing entries kept after it), so
that it and its child processes (torchrun's workers) use oxccl in place of NVIDIA's NCCL.
With mpirun, pass it to the ranks instead: -x LD_PRELOAD=$(oxccl-run --print-path).
e.g.  oxccl-run torchrun --nproc-per-node 4 train.py
  --print-path  print the library's absolute path and exit"""


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    first = args[0] if args else None
    if first in ("-h", "--help"):
        print(USAGE)
        return 0
    if first == "--version":
        print(f"oxccl-run {__version__}")
        return 0
    if first == "--print-path":
        try:
            print(library_path())
        except FileNotFoundError as e:
            print(f"oxccl-run: {e}", file=sys.stderr)
            return 1
        return 0
    if first == "--":
        args = args[1:]
    elif first is not None and first.startswith("-"):
        print(f"oxccl-run: unknown option {first}\n{USAGE}", file=sys.stderr)
        return 2
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        env = preload_env()
    except (FileNotFoundError, ValueError) as e:
        print(f"oxccl-run: {e}", file=sys.stderr)
        return 1
    # exec, not a child process: signals (Ctrl-C, a scheduler's SIGTERM) and the exit status
    # reach and come from the command itself. Exit codes on failure follow the shell's.
    try:
        os.execvpe(args[0], args, env)
    except FileNotFoundError:
        print(f"oxccl-run: {args[0]}: command not found", file=sys.stderr)
        return 127
    except OSError as e:
        print(f"oxccl-run: {args[0]}: {e.strerror}", file=sys.stderr)
        return 126
    return 0  # not reached: execvpe returns only by raising


if __name__ == "__main__":
    sys.exit(main())
