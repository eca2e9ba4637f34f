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
    random_cases(templates)



def random_cases(templates, count=300, seed=20261202):
    """Random conversations rendered by Jinja2, for the gonja-vs-Jinja2 test (model/testdata/chat/random.jsonl.gz)."""
    import gzip
    import random

    rng = random.Random(seed)
    with open(os.path.join(ROOT, "testdata", "tokenizers", "corpus.jsonl")) as f:
        corpus = [json.loads(line) for line in f]
    corpus = [s for s in corpus if len(s) < 400]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    args = ['{"city": "Zürich", "n": 1.5, "deep": {"a": [1, null, true, 1e-7]}}', "[1,2]", "not json", "{}"]
    tools = [
        {"type": "function", "function": {"name": "get_weather", "description": "°C “q”", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "f", "parameters": {"x": 0.5, "y": []}}},
    ]

    def text():
        r = rng.random()
        if r < 0.1:
            return ""
        if r < 0.2:
            return "<think>\n" + rng.choice(corpus) + "\n</think>\n\n" + rng.choice(corpus)
        if r < 0.25:
            return "<tool_response>" + rng.choice(corpus) + "</tool_response>"
        return rng.choice(corpus)

    out = []
    for name, (src, tc) in templates.items():
        tmpl = env.from_string(src)
        parts_ok = name == "fixture"
        made = 0
        while made < count:
            msgs = []
            if rng.random() < 0.5:
                msgs.append({"role": "system", "content": text()})
            for _ in range(rng.randint(1, 6)):
                role = rng.choice(["user", "user", "assistant", "assistant", "tool"] + (["system"] if name != "llama3" else []))
                m = {"role": role, "content": text()}
                if parts_ok and rng.random() < 0.3:
                    m["content"] = [rng.choice([{"type": "text", "text": text()}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "video_url", "video_url": {"url": "v"}}]) for _ in range(rng.randint(0, 3))]
                if role == "assistant" and name != "llama3":
                    if rng.random() < 0.3:
                        m["tool_calls"] = [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": rng.choice(args)}} for _ in range(rng.randint(1, 2))]
                    if rng.random() < 0.2:
                        m["reasoning_content"] = text()
                msgs.append(m)
            req = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6}
            if name != "llama3" and rng.random() < 0.3:
                req["tools"] = tools[: rng.randint(1, 2)]
            if rng.random() < 0.3:
                req["kwargs"] = {"enable_thinking": rng.choice([True, False]), "add_vision_id": rng.choice([True, False])}
            try:
                rendered = tmpl.render(
                    messages=[shape(m) for m in msgs],
                    tools=req.get("tools") or None,
                    add_generation_prompt=req["add_generation_prompt"],
                    bos_token=tc.get("bos_token") or "",
                    eos_token=tc.get("eos_token") or "",
                    **(req.get("kwargs") or {}),
                )
            except Exception:
                continue
            out.append(json.dumps({"template": name, "request": req, "output": rendered}, ensure_ascii=False))
            made += 1
    with gzip.GzipFile(os.path.join(CASES, "random.jsonl.gz"), "wb", mtime=0) as f:
        f.write(("\n".join(out) + "\n").encode())
    print("random", len(out))


if __name__ == "__main__":
    main()
