"""Cost that does not grow with memory (spec/performance.md): structure, not seconds.

Search runs over blocks of lines, not line by line: here the block engine is held to
the per-line definition of a match on tricky text, and the work of each command is
counted (files opened, folders listed), small store against a bigger one.
"""

from __future__ import annotations

import random
import re
import unicodedata

import pytest

import stm

# ---- search: the block engine finds exactly what a line-by-line search finds -----------


def reference_lines(data: bytes):
    """Lines as search has always cut them: split at b"\\n", decoded leniently, one \\r
    taken off the end; a last line without its newline counts, an empty tail does not."""
    pieces = data.split(b"\n")
    tail = pieces.pop()
    if tail:
        pieces.append(tail)
    return [p.decode("utf-8", "replace").removesuffix("\r") for p in pieces]


def reference_matches(pattern: str, regex: bool):
    if regex:
        return re.compile(pattern, re.IGNORECASE).search
    needle = pattern.casefold()
    return lambda line: needle in line.casefold()


HEADER = re.compile(r"^## (\S+) · .* <!-- stm:entry [0-9a-f]{8} -->$")


def reference_search(data: bytes, pattern: str, regex: bool, log: bool):
    """(line number, text) of each match, a log's newest entry first."""
    matches = reference_matches(pattern, regex)
    hits, stamp = [], ""
    for number, line in enumerate(reference_lines(data), 1):
        header = HEADER.match(line) if line.startswith("## ") else None
        if header:
            stamp = header.group(1)
        if matches(line):
            hits.append((stamp, number, line))
    if log:
        hits.sort(key=lambda h: ("".join(chr(0x10FFFF - ord(c)) for c in h[0]), h[1]))
    return [(number, line) for _, number, line in hits]


PIECES = [
    "needle", "NEEDLE", "Needle", "nee", "dle", "x", " ", "  ", "ss", "SS", "ß", "ẞ", "ſ",
    "K", "k", "ﬂ", "fl", "ﬁ", "İ", "i", "é", "É", "·", "\r", "\r\r", "\t", "a", "b",
    "## ", "# ", "<!-- ", "flow", "straße", "STRASSE", "\u2028",
]  # fmt: skip
RAW = [b"\xe2\x82", b"\xff", b"\xc3", b"\xef\xac"]  # invalid or cut UTF-8


def random_log(rng: random.Random, lines: int) -> bytes:
    out = []
    for _ in range(lines):
        roll = rng.random()
        if roll < 0.15:
            stamp = f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T0{rng.randint(0, 9)}:00:00Z"
            out.append(f"## {stamp} · bob <!-- stm:entry {rng.getrandbits(32):08x} -->".encode())
        elif roll < 0.2:
            out.append(b"")
        else:
            parts = [rng.choice(PIECES).encode() for _ in range(rng.randint(1, 6))]
            if rng.random() < 0.1:
                parts.insert(rng.randrange(len(parts) + 1), rng.choice(RAW))
            out.append(b"".join(parts))
    text = b"\n".join(out)
    return text + rng.choice([b"", b"\n", b"\r\n", b"\r"])


LITERALS = ["needle", "NEEDLE", "ss", "s", "ß", "ẞ", "fl", "ﬂ", "k", "K", "i", "İ", "é",
            "x needle", "dle\r", "·", "\r", "a\nb", "straße", "## 2026"]  # fmt: skip
REGEXES = [
    r"^needle",
    r"needle$",
    r"ne+dle",
    r"x\s*n",
    r"[^a]x",
    r"(?s)x.n",
    r"^$",
    r"\bss\b",
    r"(?<=x)n",
    r"\Ax",
    r"n\Z",
    r"x(?!\s)",
    r"x(?=\r)",
    r".",
    r"\W$",
    r"a|$",
    r"é$",
    r"ß",
    r"[\r]",
    r"\s",
    r"(?m)^x",
]  # fmt: skip (backreferences are refused)


def search(store, pattern, regex, layer):
    return [
        (h["line"], h["text"]) for h in stm.search_memory(store, pattern, layer=layer, regex=regex)
    ]


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 20])
def test_block_search_finds_what_a_line_by_line_search_finds(store, monkeypatch, chunk):
    monkeypatch.setattr(stm, "SEARCH_CHUNK", chunk)
    handle = stm.open_store(stacks=str(store / ".stacks"))
    rng = random.Random(chunk)
    ref = store / ".stacks" / "refs" / "fuzz.md"
    log = store / ".stacks" / "logs" / "2026-01-01.md"
    for logs in sorted(store.glob(".stacks/logs/*.md")):
        logs.unlink()
    for round_ in range(12 if chunk == 1 else 30):
        data = random_log(rng, rng.randint(0, 40))
        ref.write_bytes(b"# Fuzz\n" + data)
        log.write_bytes(data)
        for pattern, regex in [(p, False) for p in LITERALS] + [(p, True) for p in REGEXES]:
            want = reference_search(b"# Fuzz\n" + data, pattern, regex, log=False)
            assert search(handle, pattern, regex, "refs") == want, (round_, pattern, data)
            want = reference_search(data, pattern, regex, log=True)
            assert search(handle, pattern, regex, "logs") == want, (round_, pattern, data)


def test_folds_to_ascii_lists_every_character_that_folds_into_ascii():
    """A line holding one of these can match an ASCII pattern its lowered bytes do not
    show; the list is stm's, the Unicode data the running Python's."""
    found = {
        chr(code)
        for code in range(128, 0x110000)
        if any(ord(c) < 128 for c in chr(code).casefold())
    }
    assert found <= set(stm.FOLDS_TO_ASCII), sorted(found - set(stm.FOLDS_TO_ASCII))
    assert unicodedata.unidata_version  # the data the set above came from


def test_a_needle_with_no_folding_letters_skips_the_folding_scan():
    assert stm.folding_into("zzq") == ((), ())
    codes, leads = stm.folding_into("flows")
    assert "ﬂ".encode() in codes and "ß".encode() in codes  # f, l, s: ligatures and ß
    assert all(code[:1] in leads for code in codes)
