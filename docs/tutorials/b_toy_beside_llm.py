# ruff: noqa: B018, E402 - a notebook: a cell ends with the value it shows, and imports where they are used
# %% [markdown]
# # (b) The toy beside an LLM: geometry and the comparison
#
# The paper's toy (one attention layer, [definitions §1](../definitions.md)) predicts how count
# representations are laid out: equally spaced on a ray (linear attention), compressed along a segment
# (softmax), on an arc (post-LN). Figures 5 and 6 measure the same layout in a chat model's residual stream,
# location by location, and the comparison sets the two side by side. Test sizes: seconds.

# %%
import countlens as cl

cap = cl.capture("default", preset="test", progress=False)
geometry = cl.geometry(cap, preset="test")
geometry

# %% [markdown]
# Figure 5: per location, the adjacent-centroid gap ratio (mean gap between the highest counts over the
# lowest) and the effective-rank ratio. A ratio below 1 means the high counts are squeezed together — what
# softmax's normalisation predicts. ([gallery page](../gallery/geometry.md))

# %%
print(geometry.summary())
geometry.plot()

# %% [markdown]
# Figure 6 is the PCA of the count centroids at four locations; its plot function is beside Figure 5's.

# %%
from countlens.analysis.figures import plot_figure6

plot_figure6(geometry)

# %% [markdown]
# The toy's own boundary representations are a capture too, so the same figure draws for it: here the
# softmax construction at L = 12, d = 4 (checked on its full domain before it is used).

# %%
toy = cl.toy_capture("softmax", L=12, d=4)
cl.geometry(toy, preset="test").plot()

# %% [markdown]
# The comparison: the same geometry metrics, the endpoint angle and the probe norm for exact counting, for
# the toy variants and the model's locations side by side — which variant's geometry is closest.

# %%
comparison = cl.compare(cap, preset="test")
comparison.plot()

# %%
comparison
