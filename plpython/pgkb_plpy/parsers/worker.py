"""The child process of :func:`pgkb_plpy.parsers.parse_isolated`: limits itself, parses the
bytes on stdin, prints one JSON object on stdout (``{"parsed": ...}`` or ``{"error": ...}``).

Arguments: file name, declared content type ("" for none), address-space limit in bytes,
CPU-seconds limit, the limits of kb.settings as JSON (optional), the OCR mode (optional)."""

from __future__ import annotations

import json
import resource
import sys


def main() -> int:
    filename, content_type, memory, cpu = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), int(sys.argv[4])
    limits = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
    ocr = sys.argv[6] if len(sys.argv) > 6 else "defer"
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from . import ParseError, parse_bytes

    data = sys.stdin.buffer.read()
    try:
        parsed = parse_bytes(data, filename, content_type, limits=limits, ocr=ocr)
        out = {"parsed": parsed.as_json()}
    except ParseError as exc:
        out = {"error": {"kind": exc.kind, "message": exc.args[0]}}
    except MemoryError:
        out = {"error": {"kind": "out_of_memory", "message": f"parsing needed more than {memory} bytes of memory"}}
    sys.stdout.write(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
