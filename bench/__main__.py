"""``python -m bench <scenario> [options]``: run one benchmark scenario; ``python -m bench list``
names them. A scenario's own options follow its name (``python -m bench <scenario> --help``)."""

from __future__ import annotations

import sys

from bench.scenarios import SCENARIOS, listing, run

USAGE = "usage: python -m bench {list | <scenario> [options]}   (python -m bench <scenario> --help)"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + listing())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "list":
        print(listing())
        return 0
    if name not in SCENARIOS:
        print(f"unknown scenario {name!r}\n{USAGE}\n\n{listing()}", file=sys.stderr)
        return 2
    return run(name, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
