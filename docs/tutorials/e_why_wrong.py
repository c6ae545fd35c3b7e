# ruff: noqa: B018, E402 - a notebook: a cell ends with the value it shows, and imports where they are used
# %% [markdown]
# # (e) Why the answer is wrong: lens, components, diagnosis
#
# The embedded SmolLM2-135M-Instruct answers a small number whatever the count. Figures 13–15 ask where the
# right count is still readable and which component pushes the answer away from it; the diagnosis reads the
# two together. Test sizes, the embedded model.

# %%
import tempfile
from pathlib import Path

import countlens as cl

work = Path(tempfile.mkdtemp(prefix="countlens-tutorial-e-"))
cap = cl.capture("default", preset="test", progress=False)
written = cl.probe(cap, preset="test", progress=False).save(work / "probe")  # probes.json, probes.csv

# %% [markdown]
# **Figure 13 — lenses at the boundary.** Every location's boundary vector read through the final norm and
# unembedding (logit lens) and through a fitted affine map to the last location (tuned lens): how likely the
# correct count's first token is, location by location.

# %%
lens = cl.run("lens", "test", acts=str(cap.folder), probes=str(work / "probe" / "probes.json"), progress=False)
lens.save(work / "lens")
lens.plot()

# %% [markdown]
# **Figure 14 — which component writes the answer.** Direct logit attribution splits the last residual into
# the embeddings, every block's attention and MLP write and every head's share, each scored on the logit
# difference of the correct count against the model's own answer; mean-ablating each write measures its total
# effect ([definitions §2.14](../definitions.md)).

# %%
components = cl.run("components", "test", progress=False)
components.save(work / "components")
components.plot()

# %% [markdown]
# **Where the answer goes wrong** — the diagnosis reads the lens and the components of one prompt set
# together and names the component whose ablation undoes at least a quarter of the error, or says that none
# does ([definitions §2.15](../definitions.md)).

# %%
diagnosis = cl.run("diagnosis", "test", lens=str(work / "lens" / "lens.json"),
                   components=str(work / "components" / "components.json"))
diagnosis.plot()

# %%
diagnosis
