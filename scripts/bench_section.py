#!/usr/bin/env python3
"""Replaces (or appends) one section of BENCHMARKS.md: the markdown on stdin goes between
<!-- NAME:begin --> and <!-- NAME:end -->.   usage: bench_section.py NAME BENCHMARKS.md"""
import os
import re
import sys

name, path = sys.argv[1], sys.argv[2]
section = sys.stdin.read().strip("\n")
begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
block = f"{begin}\n{section}\n{end}"
if begin in text:
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
open(path, "w").write(text)
print(section)
