# ruff: noqa: B018, E402 - a notebook: a cell ends with the value it shows, and imports where they are used
# %% [markdown]
# # (c) The regularisation–norm sweep, and what the norm means against the toy's B_min
#
# The paper's question is what counting costs in parameter norm. In the toy the answer is exact: `B_min(L)`,
# the smallest per-vector norm at which a construction counts rounding-exactly on the whole domain. On a
# model we can only ask what a *read-out* of the count costs: Figure 8 draws, for every ridge coefficient α,
# the probe's native ℓ2 norm against its held-out rounded accuracy.

# %%
import countlens as cl

cap = cl.capture("default", preset="test", progress=False)
sweep = cl.sweep(cap, preset="test")
print(sweep.summary())
sweep.plot()

# %% [markdown]
# Each point is one α (colour: log10 of the relative coefficient α_rel); the black stars are the
# unregularised probes. The smallest norm that still rounds every held-out count right is the probe's
# "cost" of reading the count at this location. The numbers behind the plot, per split seed:

# %%
seed = sweep.seeds[0]
exact = [norm for norm, acc in zip(seed.coef_norm, seed.heldout_rounded_acc, strict=True) if acc == 1.0]
print(f"location {sweep.location}: {len(seed.alphas)} alphas; norms {min(seed.coef_norm):.3g} .. "
      f"{max(seed.coef_norm):.3g}; smallest norm with held-out accuracy 1: "
      f"{min(exact):.3g}" if exact else "no alpha reaches held-out accuracy 1 at these sizes")

# %% [markdown]
# The toy's side: `b_min(variant, L, d)` is the norm a checked construction needs (the full-domain checker
# passes it). Its growth with L is Table 1's rate — Θ(1) for linear attention, Θ(L) for softmax, Θ(L^{3/2})
# for bare post-LN. A probe's norm is in the activations' own units, so compare its *growth* with the count
# range, not its value, with the toy's rate ([definitions §1](../definitions.md)).

# %%
from countlens.toy import b_min

for variant in ("linear", "softmax", "softmax-postln-learned"):
    values = {L: b_min(variant, L, 16) for L in (10, 30, 100)}
    print(variant, {L: round(v, 2) for L, v in values.items()})
