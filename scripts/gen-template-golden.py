#!/usr/bin/env python3
"""Renders the fixture model's chat template with Jinja2 the way transformers/vLLM do, for model/ golden tests.

    python3 scripts/gen-template-golden.py

Reads model/testdata/chat/cases.json (OpenAI-shaped requests) and writes model/testdata/chat/<template>/<case>.txt.
The message shaping mirrors model.templateMessage: image_url/video_url parts become {"type": "image"} /
{"type": "video"}, tool-call arguments are parsed from their JSON string. Needs only the jinja2 package.
"""
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "testdata", "models", "Qwen3-VL-2B-Instruct")
CASES = os.path.join(ROOT, "model", "testdata", "chat")


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def shape(msg):
    out = {"role": msg["role"]}
    content = msg.get("content")
    if isinstance(content, list):
        parts = []
        for p in content:
            t = p.get("type")
            if t in ("image_url", "image", "input_image", "image_pil", "image_embeds"):
                parts.append({"type": "image"})
            elif t in ("video_url", "video"):
                parts.append({"type": "video"})
            else:
                parts.append({"type": t, "text": p.get("text", "")})
        out["content"] = parts
    else:
        out["content"] = content if content is not None or "content" not in msg else None
        if "content" not in msg:
            out["content"] = ""
    if msg.get("name"):
        out["name"] = msg["name"]
    if msg.get("reasoning_content"):
        out["reasoning_content"] = msg["reasoning_content"]
    if msg.get("tool_calls"):
        calls = []
        for tc in msg["tool_calls"]:
            args = tc["function"].get("arguments", "")
            try:
                parsed = json.loads(args)
                if isinstance(parsed, dict):
                    args = parsed
            except ValueError:
                pass
            call = {}
            if tc.get("id"):
                call["id"] = tc["id"]
            call["type"] = tc.get("type") or "function"
            call["function"] = {"name": tc["function"]["name"], "arguments": args}
            calls.append(call)
        out["tool_calls"] = calls
    if msg.get("tool_call_id"):
        out["tool_call_id"] = msg["tool_call_id"]
    return out


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    # name -> (template source, tokenizer_config.json); "fixture" is the fixture model's chat_template.jinja, the
    # others are tokenizer_config.json templates (Qwen3 text-only, Llama-3) that exercise more Jinja features.
    templates = {}
    with open(os.path.join(MODEL, "tokenizer_config.json")) as f:
        qwen_tc = json.load(f)
    with open(os.path.join(MODEL, "chat_template.jinja")) as f:
        templates["fixture"] = (f.read(), qwen_tc)
    templates["qwen3-text"] = (qwen_tc["chat_template"], qwen_tc)
    with open(os.path.join(ROOT, "testdata", "tokenizers", "llama3", "tokenizer_config.json")) as f:
        llama_tc = json.load(f)
    templates["llama3"] = (llama_tc["chat_template"], llama_tc)
    with open(os.path.join(CASES, "cases.json")) as f:
        cases = json.load(f)
    for case in cases:
        for name in case.get("templates") or ["fixture"]:
            src, tc = templates[name]
            kwargs = dict(case.get("kwargs") or {})
            out = env.from_string(src).render(
                messages=[shape(m) for m in case["messages"]],
                tools=case.get("tools") or None,
                add_generation_prompt=case.get("add_generation_prompt", False),
                bos_token=tc.get("bos_token") or "",
                eos_token=tc.get("eos_token") or "",
                **kwargs,
            )
            os.makedirs(os.path.join(CASES, name), exist_ok=True)
            with open(os.path.join(CASES, name, case["name"] + ".txt"), "w") as f:
                f.write(out)
            print(name, case["name"], len(out))


if __name__ == "__main__":
    main()
