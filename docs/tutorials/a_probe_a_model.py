# ruff: noqa: B018, E402 - a notebook: a cell ends with the value it shows, and imports where they are used
# %% [markdown]
# # (a) Probe a model by name in five lines
#
# Capture the embedded chat model's residual stream at the assistant boundary on counting prompts, fit a
# validation-selected ridge probe of the count at every location, and draw Figure 7. `preset="test"` keeps
# it to seconds (26 short prompts); `preset="quick"` is `make demo`'s size and `"full"` the paper's. Any hub
# id, model folder or `.gguf` file works where `"default"` stands (the embedded SmolLM2-135M-Instruct).

# %%
import countlens as cl

cap = cl.capture("default", preset="test", progress=False)
probes = cl.probe(cap, preset="test", progress=False)
probes

# %% [markdown]
# A result shows itself as a short table (above). Its `.summary()` is the console line, and `.plot()` draws
# the experiment's own figure: Figure 7, test rounded accuracy of the validation-selected probe per count
# range (see the [Figure 7 gallery page](../gallery/probe.md) for how to read it).

# %%
print(probes.summary())
probes.plot()

# %% [markdown]
# What the capture holds: one row per prompt, `acts(location)` as a `(rows, d)` array, the counts as labels.

# %%
X, n = cap.acts(-1), cap.counts()
print(cap.meta.model_name, X.shape, "counts", sorted(set(n.tolist())))
