#!/usr/bin/env python3
"""Every link of the project's Markdown resolves: a relative link names a file or folder that
exists, and a `#fragment` names a heading of its target (GitHub's anchors). External links
(a scheme such as https:) are not followed: this checks the checkout, offline.

    check_links.py <repository root> <file.md>...
"""
import os
import re
import sys

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose_lines(path):
    """The lines outside fenced code blocks, with inline code removed."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line.lstrip()):
                inside = not inside
                continue
            if not inside:
                yield number, re.sub(r"`[^`]*`", "", line)


def anchors(path):
    """GitHub's heading anchors of a Markdown file: lower case, punctuation dropped, spaces to
    hyphens, repeats numbered."""
    seen, out = {}, set()
    for _, line in prose_lines(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def main():
    root, files = sys.argv[1], sys.argv[2:]
    broken, checked = [], 0
    for md in files:
        here = os.path.dirname(md)
        for number, line in prose_lines(md):
            for m in LINK.finditer(line):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                    continue  # https:, mailto:: not followed offline
                checked += 1
                path, _, fragment = target.partition("#")
                resolved = os.path.normpath(os.path.join(here, path)) if path else md
                where = f"{os.path.relpath(md, root)}:{number}"
                if not os.path.exists(resolved):
                    broken.append(f"{where}: '{target}' names {os.path.relpath(resolved, root)}, which does not exist")
                elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                    broken.append(f"{where}: '{target}' names no heading of {os.path.relpath(resolved, root)}")
    for b in broken:
        print(b)
    print(f"check_links: {checked} links in {len(files)} files, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
