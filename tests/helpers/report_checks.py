"""Checks that every number on the HTML report is the JSON value its span names."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser


class ReportParser(HTMLParser):
    """Collects value spans (file, key path, text), key spans, image sources, and the text outside spans."""

    def __init__(self):
        super().__init__()
        self.values, self.keys, self.images, self.free_text = [], [], [], []
        self._span = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("style", "script"):
            self._skip += 1
        if tag == "img":
            self.images.append(a["src"])
        if tag == "span" and a.get("class") in ("v", "k"):
            self._span = [a["class"], a["data-json"], json.loads(a["data-key"]), ""]

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._skip -= 1
        if tag == "span" and self._span is not None:
            (self.values if self._span[0] == "v" else self.keys).append(tuple(self._span[1:]))
            self._span = None

    def handle_data(self, data):
        if self._span is not None:
            self._span[3] += data
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
    """Assert every span matches its JSON and no number appears outside spans but headings; return parser."""
    parser = ReportParser()
    parser.feed(html_text)
    for rel, keys, text in parser.values:
        value = at(json.loads((out / rel).read_text()), keys)
        assert same(text, value), (rel, keys, text, value)
    for rel, keys, text in parser.keys:
        at(json.loads((out / rel).read_text()), keys)
        assert text == str(keys[-1])
    free = re.sub(r"\b(Figures?|Tables?) \d+( and \d+)?", "", " ".join(parser.free_text))
    assert not re.search(r"\d", free), re.findall(r".{0,30}\d.{0,30}", free)[:3]
    return parser
