#!/usr/bin/env python3
"""Reference renderer for kvserve's chat template tests: Python jinja2 configured as Hugging Face
transformers configures it (transformers.utils.chat_template_utils._compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols and the
{% generation %} block), a `tojson`
filter that is json.dumps(ensure_ascii=False) without HTML escaping, and the globals
raise_exception and strftime_now; rendered with messages, tools (None when absent),
documents=None, add_generation_prompt, bos_token, eos_token and extra keyword arguments.

stdin: {"cases": [{"template": path (or "source": text), "messages": [...], "tools": [...] (optional),
                   "add_generation_prompt": bool, "bos_token": str, "eos_token": str,
                   "extra": {...}, "now": unix seconds (optional: pins strftime_now, UTC)}]}
stdout: [{"ok": true, "text": str} | {"ok": false, "error": str}, ...] (ASCII JSON)
"""
import json
import sys
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %} block, rendered as its body (the
    assistant-mask tracking it also does is irrelevant to the text)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        if now is None:
            return datetime.now().strftime(format)
        return datetime.fromtimestamp(now, tz=timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}  # (now, source) -> Template: compiling dominates; a test renders one template many times


def render(case):
    if "source" in case:
        source = case["source"]
    else:
        with open(case["template"], encoding="utf-8") as f:
            source = f.read()
    key = (case.get("now"), source)
    if key not in _compiled:
        _compiled[key] = make_env(case.get("now")).from_string(source)
    template = _compiled[key]
    return template.render(messages=case.get("messages", []), tools=case.get("tools"), documents=None,
                           add_generation_prompt=case.get("add_generation_prompt", False),
                           bos_token=case.get("bos_token", ""), eos_token=case.get("eos_token", ""),
                           **case.get("extra", {}))


def main():
    job = json.load(sys.stdin)
    results = []
    for case in job["cases"]:
        try:
            results.append({"ok": True, "text": render(case)})
        except Exception as e:  # noqa: BLE001 - every failure is a result to compare
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
