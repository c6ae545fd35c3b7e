# ruff: noqa: B018, E402 - a notebook: a cell ends with the value it shows, and imports where they are used
# %% [markdown]
# # (d) Where the count is formed: items, patching over positions, heads
#
# Figures 10–12 ask where in the prompt and in which block the count comes together, on the embedded model
# at the test preset's tiny sizes (seconds; `make demo` runs them at the quick sizes). Each result shows
# itself as a table; `.plot()` draws its figure.

# %%
import tempfile
from pathlib import Path

import countlens as cl

work = Path(tempfile.mkdtemp(prefix="countlens-tutorial-d-"))

# %% [markdown]
# **Figure 10 — the count at every item.** A capture with `positions="items"` (`--positions items`) keeps
# the residual at every item, not only at the assistant boundary; ridge probes then read the *running* count (targets so far) and
# the final count at each relative position of the list.

# %%
from countlens.llm.capture.experiment import run_capture

items_config = cl.config("capture-items", "test")  # the report's own items capture: short lists, 9 locations
print(items_config.prompts.L, items_config.prompts.counts, items_config.locations, items_config.positions)
items = run_capture(items_config, work / "items")
running = cl.run("probe-running", "test", acts=str(items.folder), progress=False)
print(running.summary())
running.plot()

# %% [markdown]
# **Figure 11 — patching over positions and layers.** Each prompt has a twin with one target turned into a
# distractor; the clean residual at one (location, position) replaces the twin's, everywhere, and the
# normalised logit difference says how much of the clean answer that one cell restores (0: the twin, 1: the
# clean run; [definitions §2.10](../definitions.md)). `location_step=3` (`--location-step 3`) patches every third
# location and the last, a third of the cost.

# %%
positions = cl.run("patching-positions", "test", location_step=3, progress=False)  # every third location and the last
positions.plot()

# %% [markdown]
# **Figure 12 — the heads that read the items.** Attention mass from the boundary to the targets and the
# distractors per head, and what mean-ablating each head's output at the boundary does. It reads the
# probes of the boundary capture (their direction is the read-out whose shift is reported).

# %%
cap = cl.capture("default", preset="test", progress=False)
probes = cl.probe(cap, preset="test", progress=False)
probes.save(work / "probe")
heads = cl.run("heads", "test", probes=str(work / "probe" / "probes.json"), progress=False)
heads.plot()

# %%
heads
