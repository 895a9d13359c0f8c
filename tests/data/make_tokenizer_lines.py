"""Generate `tokenizer_lines.txt`: 10,000+ lines of varied text for tokenizer parity tests (code, JSON, many
scripts, emoji, whitespace runs, special-token strings inside text). Every phrase and word list is written here;
deterministic for a seed. Run: python tests/data/make_tokenizer_lines.py > tests/data/tokenizer_lines.txt"""

from __future__ import annotations

import json
import random

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "model", "token", "cache", "prefix", "server", "request", "batch", "kernel", "memory", "page", "tree", "grammar", "schema", "value", "string", "number", "array", "object", "stream", "engine", "thread", "queue", "latency", "throughput", "it's", "we're", "they've", "I'm", "you'll", "she'd", "can't", "won't", "don't"]
SCRIPTS = [
    "你好，世界。今天天气很好，我们去公园散步吧。", "机器学习模型需要大量的数据。", "東京は日本の首都です。",
    "ひらがなとカタカナと漢字を混ぜて書きます。", "안녕하세요, 만나서 반갑습니다.", "한국어 문장을 토큰으로 나눕니다.",
    "Привет, как дела? Всё хорошо.", "Съешь же ещё этих мягких французских булок.", "Καλημέρα, τι κάνεις σήμερα;",
    "مرحبا بالعالم، كيف حالك؟", "שלום עולם, מה שלומך?", "नमस्ते दुनिया, आप कैसे हैं?", "สวัสดีครับ ยินดีที่ได้รู้จัก",
    "Xin chào, bạn có khỏe không?", "Zażółć gęślą jaźń.", "Ærøskøbing ligger på Ærø.", "naïve café résumé coöperate",
    "Straße, Größe, Übermaß, äöü ÄÖÜ ß", "ﬁ ﬂ ligatures and full-width ＡＢＣ１２３", "e\u0301 combining acute, a\u0308",
    "zero\u200bwidth\u200cjoiner\u200dtest", "Türkçe ıİ şŞ ğĞ", "ქართული ენა", "Հայերեն լեզու", "አማርኛ ቋንቋ",
]
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "✨", "🤖", "🧪", "🏳️‍🌈", "👩🏿‍💻", "☕", "🎉"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<think>", "</think>",
            "<|im_start|>user\n", "<|im_start|>assistant\n"]
CODE = [
    "def add(a, b):\n    return a + b", "for (int i = 0; i < n; ++i) { sum += x[i]; }", "const f = (x) => x ** 2;",
    "if __name__ == \"__main__\":\n\tmain()", "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }", "fn main() { let v: Vec<u8> = vec![1, 2]; }",
    "x = [i * i for i in range(10) if i % 2 == 0]", "git commit -m 'fix: off-by-one in page_table'",
    "    # indented comment with trailing spaces   ", "<div class=\"row\"><span>&amp; &lt;tag&gt;</span></div>",
    "curl -s http://127.0.0.1:30000/v1/models | jq '.data[0].id'", "λx.λy.x y  // lambda calculus",
]


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
    if rng.random() < 0.3:
        words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 10**rng.randint(1, 9))))
    return " ".join(words) + rng.choice([".", "!", "?", "...", ",", ""])


def json_line(rng: random.Random) -> str:
    obj = {rng.choice(WORDS): rng.choice([rng.randint(-1000, 10**6), rng.random(), sentence(rng), None, True,
                                          [rng.randint(0, 9) for _ in range(3)], {"nested": rng.choice(SCRIPTS)}])
           for _ in range(rng.randint(1, 5))}
    return json.dumps(obj, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 2]))


def whitespace(rng: random.Random) -> str:
    parts = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
    gaps = [" " * rng.randint(1, 8), "\t" * rng.randint(1, 3), " \t ", "\u00a0", "\u3000", "  \n  ", "\r\n", "\n\n\n"]
    return rng.choice(["", " ", "   ", "\t"]) + "".join(p + rng.choice(gaps) for p in parts)


def mixed(rng: random.Random) -> str:
    pieces = [sentence(rng), rng.choice(SCRIPTS), rng.choice(EMOJI) * rng.randint(1, 3), rng.choice(SPECIALS),
              rng.choice(CODE), str(rng.uniform(-1e6, 1e6)), rng.choice(["https://example.org/a?b=c&d=e#f",
                                                                         "user@example.com", "C:\\Users\\x"])]
    rng.shuffle(pieces)
    return rng.choice([" ", "", "\n", "  "]).join(pieces[: rng.randint(2, len(pieces))])


def main() -> None:
    rng = random.Random(20261203)
    makers = [sentence, json_line, whitespace, mixed, lambda r: r.choice(SCRIPTS), lambda r: r.choice(CODE),
              lambda r: "".join(r.choice(EMOJI) for _ in range(r.randint(1, 6))),
              lambda r: r.choice(SPECIALS) + sentence(r) + r.choice(SPECIALS)]
    for _ in range(10_400):
        # one sample per output line: newlines inside a sample are written as the two characters \n
        text = rng.choice(makers)(rng)
        print(text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r"))


if __name__ == "__main__":
    main()
