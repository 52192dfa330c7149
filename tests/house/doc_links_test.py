#!/usr/bin/env python3
"""doc_links_test.py SOURCE_DIR — every relative link and #anchor of the
Markdown docs resolves: README.md, tests/README.md and every .md under
docs/, bench/ and examples/. A link [text](path), ![alt](path), [ref]: path or <a href>/<img
src> that is not a URL must name a file or folder of the tree; its #anchor
(or a bare #anchor) must be a heading of the Markdown file it names, as
GitHub makes them: the heading's text lowercased, what is neither a letter,
a digit, '_', '-' nor a space dropped, spaces made '-', a repeat suffixed
-1, -2 ... Code blocks and `code spans` are not read. Prints each broken
link as FILE:LINE: TARGET (why) and exits 1 if there is one."""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\".*\")?\s*$")
HTML = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]*)\"", re.I)
NAMED = re.compile(r"<a\s[^>]*?(?:name|id)=\"([^\"]+)\"", re.I)
CODESPAN = re.compile(r"(`+)(.+?)\1")


def docs():
    yield os.path.join(ROOT, "README.md")
    yield os.path.join(ROOT, "tests", "README.md")
    for top in ("docs", "bench", "examples"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            # npm's packages (bench/run.sh peers installs them) are not our docs
            dirs[:] = sorted(d for d in dirs if d != "node_modules")
            for name in sorted(files):
                if name.endswith(".md"):
                    yield os.path.join(folder, name)


def lines_outside_code(path):
    """(line number, text) of each line not in a fenced code block."""
    fenced = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if fenced is None:
                    fenced = m.group(1)
                elif m.group(1) == fenced:
                    fenced = None
                continue
            if fenced is None:
                yield n, line.rstrip("\n")


def slug(text):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        found, seen = set(), {}
        for _, line in lines_outside_code(path):
            for name in NAMED.findall(line):
                found.add(name)
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            k = seen.get(base, 0)
            seen[base] = k + 1
            found.add(base if k == 0 else "%s-%d" % (base, k))
        _anchors[path] = found
    return _anchors[path]


def targets(line):
    line = CODESPAN.sub("", line)
    for rx in (INLINE, HTML):
        for t in rx.findall(line):
            yield t
    m = REFDEF.match(line)
    if m:
        yield m.group(1)


def check(path):
    bad = []
    for n, line in lines_outside_code(path):
        for t in targets(line):
            if t == "" or re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I):
                continue  # a URL (http:, https:, mailto: ...)
            where, _, frag = t.partition("#")
            dest = path if where == "" else os.path.normpath(
                os.path.join(os.path.dirname(path), where))
            if not os.path.exists(dest):
                bad.append((n, t, "no such file"))
                continue
            if not frag:
                continue
            if not dest.endswith(".md") or os.path.isdir(dest):
                bad.append((n, t, "an anchor into something that is not Markdown"))
            elif frag not in anchors(dest):
                bad.append((n, t, "no heading with that anchor in %s" % os.path.relpath(dest, ROOT)))
    return bad


def main():
    broken = links = 0
    for path in docs():
        for n, t, why in check(path):
            print("%s:%d: %s (%s)" % (os.path.relpath(path, ROOT), n, t, why))
            broken += 1
        links += sum(1 for _, line in lines_outside_code(path) for _ in targets(line))
    print("doc links: %d links and anchors read, %d broken" % (links, broken))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
