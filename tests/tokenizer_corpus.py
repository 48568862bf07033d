"""Texts that tokenizer tests run through both ember.tokenizers and the reference."""

CORPUS = [
    # plain English
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I can't believe it's not butter! They're here, we've won, you'll see, he'd go, I'm fine.",
    "Tokenizers turn text into numbers; models turn numbers into meaning.",
    "A sentence with UPPERCASE, lowercase and MiXeD case words.",
    "don't do not won't shouldn't y'all o'clock",
    # accents and other Latin
    "café naïve Zürich résumé façade São Paulo Ærøskøbing",
    "Crème brûlée, jalapeño, piñata, Dvořák, Łódź, Straße, İstanbul, ΟΔΟΣ",
    "e\u0301 vs \u00e9 and A\u030a vs \u00c5 (combining marks)",
    "ﬁ ﬂ ① ½ ² ™ Ⅻ ｆｕｌｌｗｉｄｔｈ",
    # CJK and other scripts
    "中文分词测试：我爱北京天安门。",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 문장입니다. 안녕하세요!",
    "Русский текст и Ελληνικά γράμματα",
    "עברית ועربي مرحبا بالعالم",
    "हिन्दी वाक्य और தமிழ் எழுத்து",
    "ภาษาไทย ไม่มีช่องว่าง",
    # emoji
    "👍🏽 thumbs up with skin tone",
    "family: 👨‍👩‍👧 and flags 🇫🇷🇯🇵 and 🥲🫠",
    "❤️ red heart, ☕ coffee, 🤖 robot",
    # punctuation runs
    "!!!???...",
    "-- --- — – … «quotes» “curly” ‘single’",
    "(((nested))) [[brackets]] {{braces}} <<angles>>",
    "@#$%^&*()_+=|\\~`",
    # very long words
    "a" * 220,
    "supercalifragilisticexpialidocious" * 7,
    "x" + "é" * 120 + "ß" * 90,
    "Pneumonoultramicroscopicsilicovolcanoconiosis" + "-ish" * 40,
    # odd whitespace
    "tab\tseparated\tvalues",
    "non\u00a0breaking\u00a0space and em\u2003space and thin\u2009space",
    "line one\nline two\r\nline three\n\n\nend",
    "   leading spaces",
    "trailing spaces   ",
    "  both  \t ends  ",
    "\u3000ideographic\u3000space\u3000",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "control\x00chars\x01and\x7fdel\x1c\x1f",
    " ",
    "\n",
    "\t \n \r",
    # numbers
    "3.14159 2,718 1e-10 -42 +7 0x1F 1234567890",
    "Room 101, 2024-05-17 at 09:30:15, ¼ cup, ٣٤٥ and ७८९",
    # URLs, email, code
    "https://example.com/path?query=1&other=two#fragment",
    "mail me at someone.name+tag@example.co.uk",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<html><body class=\"x\">Hi &amp; bye</body></html>",
    "SELECT * FROM t WHERE a >= 10 AND b != 'x';",
    # mixed
    "Mixed 中文 and English, 日本語 too! 123 😀",
    "I'm in Zürich for the 2nd time—it's great!!!",
    "ALL CAPS SHOUTING AND numbers 42 42 42",
    "the the the the the the",
    # empty
    "",
]

PAIRS = [
    ("Hello world", "How are you?"),
    ("café naïve", "中文 日本語 한국어"),
    ("", "only the second one"),
    ("only the first one", ""),
    ("a" * 50, "b c d e f g"),
    ("The quick brown fox jumps over the lazy dog.", "!!!???..."),
    ("👍🏽 emoji", "tab\tand\u00a0nbsp"),
]
