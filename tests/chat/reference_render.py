#!/usr/bin/env python3
"""Developer cross-check, not part of the test suite: renders the bundle's chat
templates with Python's jinja2 set up the way Hugging Face transformers sets it
up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
its own tojson, raise_exception and strftime_now), so that graft's renderer and
the hand-written expected files in tests/data/chat/ can be compared with what
transformers would produce.

  python3 tests/chat/reference_render.py TEMPLATE.jinja basic|tools [--bos B --eos E]
  python3 tests/chat/reference_render.py --all DIR [--out OUT]  # one line per template: ok / error
  python3 tests/chat/reference_render.py --golden DIR           # rewrites tests/data/chat/jinja2/

--golden renders every template with tests/data/chat/jinja2/conversation.json
(variant a: with a generation prompt; variant b: without one and with
enable_thinking=false) and writes jinja2's output, or its error, as
NAME.VARIANT.txt / NAME.VARIANT.err next to it. Those files are jinja2's
work, not graft's: template_jinja2_test.cpp checks graft against them.

The conversations mirror the ones in tests/chat/conversations.h, with tool-call
arguments already parsed to objects (graft does that before rendering).
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SYSTEM = "You are a helpful assistant."
BASIC = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Germany?"},
]
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name."}},
            "required": ["city"],
        },
    },
}]
WITH_TOOLS = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
     "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"},
]


class GenerationTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime(2025, 3, 14, 12, 0, 0).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(source, kind, bos, eos, extra=None):
    messages, tools = (BASIC, None) if kind == "basic" else (WITH_TOOLS, TOOLS)
    template = environment().from_string(source)
    return template.render(messages=messages, tools=tools, documents=None, add_generation_prompt=True,
                           bos_token=bos, eos_token=eos, **(extra or {}))


def golden(templates):
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "chat", "jinja2")
    request = json.load(open(os.path.join(folder, "conversation.json"), encoding="utf-8"))
    variants = {"a": {"add_generation_prompt": True}, "b": {"add_generation_prompt": False, "enable_thinking": False}}
    for name in sorted(os.listdir(templates)):
        if not name.endswith(".jinja"):
            continue
        source = open(os.path.join(templates, name), encoding="utf-8").read()
        for variant, kwargs in variants.items():
            stem = os.path.join(folder, f"{name[:-6]}.{variant}")
            for old in (stem + ".txt", stem + ".err"):
                if os.path.exists(old):
                    os.remove(old)
            try:
                text = environment().from_string(source).render(
                    messages=request["messages"], tools=request["tools"], documents=None,
                    bos_token="<s>", eos_token="</s>", **kwargs)
                open(stem + ".txt", "w", encoding="utf-8").write(text)
            except Exception as e:  # noqa: BLE001 - the error is the expectation
                open(stem + ".err", "w", encoding="utf-8").write(str(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("template", nargs="?")
    ap.add_argument("kind", nargs="?", default="basic")
    ap.add_argument("--bos", default="<s>")
    ap.add_argument("--eos", default="</s>")
    ap.add_argument("--all")
    ap.add_argument("--kwargs", default="{}")
    ap.add_argument("--out", help="with --all: write NAME.KIND.txt (or .err) files into this folder")
    ap.add_argument("--golden", metavar="TEMPLATES")
    args = ap.parse_args()
    if args.golden:
        golden(args.golden)
        return
    if args.all:
        for name in sorted(os.listdir(args.all)):
            if not name.endswith(".jinja"):
                continue
            source = open(os.path.join(args.all, name), encoding="utf-8").read()
            for kind in ("basic", "tools"):
                stem = os.path.join(args.out, f"{name[:-6]}.{kind}") if args.out else None
                try:
                    text = render(source, kind, args.bos, args.eos)
                    status = "ok"
                    if stem:
                        open(stem + ".txt", "w", encoding="utf-8").write(text)
                except Exception as e:  # noqa: BLE001 - report every failure
                    status = f"error: {type(e).__name__}: {e}"
                    if stem:
                        open(stem + ".err", "w", encoding="utf-8").write(status)
                print(f"{name} {kind}: {status}")
        return
    source = open(args.template, encoding="utf-8").read()
    sys.stdout.write(render(source, args.kind, args.bos, args.eos, json.loads(args.kwargs)))


if __name__ == "__main__":
    main()
