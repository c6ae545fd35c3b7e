# ruff: noqa: B018, E402 - a notebook: a cell ends with the value it shows, and imports where they are used
# %% [markdown]
# # (g) Your own counting task from a JSONL, CSV or `datasets` file
#
# Any file of counting prompts becomes a task: `--task file:PATH` on the command line, `task="file:PATH"` in
# Python. A record is a `text` (or chat `messages`), its `count`, and optionally the items' character
# `spans` and which of them are `targets` ([the format](../tasks/README.md)). Here a small file is written
# first; [`docs/tasks/example.jsonl`](../tasks/example.jsonl) is a complete example.

# %%
import json
import random
import tempfile
from pathlib import Path

import countlens as cl

work = Path(tempfile.mkdtemp(prefix="countlens-tutorial-g-"))
rng = random.Random(0)
records = []
for _repeat in range(2):
    for count in range(0, 10):
        words = ["cat"] * count + ["dog"] * rng.randint(1, 4)
        rng.shuffle(words)
        head = "Count the cats.\n"
        text = head + " ".join(words) + "\nAnswer with a number."
        spans, at = [], len(head)
        for w in words:
            spans.append([at, at + len(w)])
            at += len(w) + 1
        records.append({"text": text, "count": count, "spans": spans, "targets": [w == "cat" for w in words]})
path = work / "cats.jsonl"
path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
print(len(records), "records; the first:", json.dumps(records[1])[:160])

# %% [markdown]
# The records are checked when the task is read, before any model loads (a count that disagrees with the
# target spans, an item the tokenizer merges with its neighbour: one line naming the record). Then the same
# verbs as for the built-in tasks: a capture (add `answers=True` for the model's own answers, as
# `--answers` does), and probes.

# %%
cap = cl.capture("default", preset="test", task=f"file:{path}", progress=False)
print(cap.meta.n_prompts, "prompts; counts", sorted(set(cap.counts().tolist())))
probes = cl.probe(cap, preset="test", progress=False)
print(probes.summary())
probes.plot()
