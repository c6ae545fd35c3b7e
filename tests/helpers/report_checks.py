"""Checks that every number on the HTML report is the JSON value its span names."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser


class ReportParser(HTMLParser):
    """Collects value spans (file, key path, text), ratio spans (file, key path, key path under it, text),
    key spans, image sources, link targets, and the text outside spans."""

    def __init__(self):
        super().__init__()
        self.values, self.ratios, self.keys, self.images, self.links, self.free_text = [], [], [], [], [], []
        self._span = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("style", "script"):
            self._skip += 1
        if tag == "img":
            self.images.append(a["src"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "span" and a.get("class") in ("v", "k", "q"):
            over = [json.loads(a["data-over"])] if a["class"] == "q" else []
            self._span = [a["class"], a["data-json"], json.loads(a["data-key"]), *over, ""]

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._skip -= 1
        if tag == "span" and self._span is not None:
            {"v": self.values, "k": self.keys, "q": self.ratios}[self._span[0]].append(tuple(self._span[1:]))
            self._span = None

    def handle_data(self, data):
        if self._span is not None:
            self._span[-1] += data
        elif not self._skip:
            self.free_text.append(data)


def at(obj, keys):
    for k in keys:
        obj = obj[k]
    return obj


def same(text, value):
    """The shown text is the JSON value (numbers to the 4 significant digits shown)."""
    if value is None:
        return text == "—"
    if isinstance(value, bool):
        return text == ("yes" if value else "no")
    if isinstance(value, (int, float)):
        shown = float(text)
        return shown == value or abs(shown - value) <= 5e-4 * abs(value)
    return text == str(value)


def check_report(out, html_text):
    """Assert every value and ratio span matches its JSON and no number appears outside spans but figure and
    table numbers; return the parser."""
    parser = ReportParser()
    parser.feed(html_text)
    for rel, keys, text in parser.values:
        value = at(json.loads((out / rel).read_text()), keys)
        assert same(text, value), (rel, keys, text, value)
    for rel, keys, over, text in parser.ratios:
        data = json.loads((out / rel).read_text())
        ratio = float(at(data, keys)) / float(at(data, over))
        assert same(text, ratio), (rel, keys, over, text, ratio)
    for rel, keys, text in parser.keys:
        at(json.loads((out / rel).read_text()), keys)
        assert text == str(keys[-1])
    free = re.sub(r"\b(Figures?|Tables?) \d+( and \d+)?", "", " ".join(parser.free_text))
    assert not re.search(r"\d", free), re.findall(r".{0,30}\d.{0,30}", free)[:3]
    return parser
