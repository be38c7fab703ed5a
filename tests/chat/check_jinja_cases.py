#!/usr/bin/env python3
"""Developer cross-check, not part of the test suite: replays the case tables
of tests/chat/jinja_test.cpp (every check({...}) entry: template, variables,
expected text) through Python's jinja2 configured as Hugging Face configures
it, and reports any case where jinja2 disagrees with the expectation.

  python3 tests/chat/check_jinja_cases.py [tests/chat/jinja_test.cpp]
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_render import environment  # noqa: E402

LITERAL = re.compile(r'R"J\((.*?)\)J"|"((?:[^"\\]|\\.)*)"', re.S)


def c_string(body):
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        e = body[i + 1]
        if e == "x":
            out.append(int(body[i + 2:i + 4], 16))
            i += 4
            continue
        out += {"n": b"\n", "t": b"\t", '"': b'"', "\\": b"\\"}[e]
        i += 2
    return out.decode()


def cases(source):
    for block in re.finditer(r"check\(\{(.*?)\n  \}\);", source, re.S):
        literals = [m.group(1) if m.group(1) is not None else c_string(m.group(2))
                    for m in LITERAL.finditer(block.group(1))]
        for i in range(0, len(literals) - 2, 3):
            yield literals[i], literals[i + 1], literals[i + 2]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "jinja_test.cpp")
    env = environment()
    failures = total = 0
    for template, context, expected in cases(open(path, encoding="utf-8").read()):
        total += 1
        try:
            got = env.from_string(template).render(**json.loads(context))
        except Exception as e:  # noqa: BLE001
            got = f"error: {type(e).__name__}: {e}"
        if got != expected:
            failures += 1
            print(f"MISMATCH {template!r}\n  expected {expected!r}\n  jinja2   {got!r}")
    print(f"{total - failures}/{total} cases agree with jinja2")


if __name__ == "__main__":
    main()
