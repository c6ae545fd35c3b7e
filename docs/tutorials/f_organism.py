# ruff: noqa: B018, E402 - a notebook: a cell ends with the value it shows, and imports where they are used
# %% [markdown]
# # (f) Train an organism with a circuit you plant, and check a read-out against it
#
# A flat figure on a small chat model cannot tell a tool that works from one that does not. A *model
# organism* is a stock `LlamaForCausalLM` trained to count with its circuit planted: every head not named in
# `live_heads` has its slice of the output projection held at exactly zero, so only the live heads move
# information between positions. Here the test preset's organism: one block of two heads at L = 3, head 0.1
# live (seconds to train on a CPU; `countlens organism train` trains the quick one, L = 30, in about two
# minutes).

# %%
import tempfile
from pathlib import Path

import countlens as cl
from countlens.llm.organisms.experiment import run_organism

work = Path(tempfile.mkdtemp(prefix="countlens-tutorial-f-"))
config = cl.config("organism", "test")
print("L =", config.L, "| blocks x heads:", config.layers, "x", config.heads, "| live heads:", config.live_heads)
organism = run_organism(config, out=work / "organism", reuse=True)
organism

# %%
organism.plot()

# %% [markdown]
# Now the read-outs, each against what the construction guarantees: greedy accuracy, ablating a zeroed head
# (must move nothing), direct logit attribution (zeroed heads' share must be zero), patching, steering and
# the probe. Every check prints its value and its bound ([the organisms' guide](../guide/organisms.md)).

# %%
from countlens.llm.organisms.checks import checks_text

checks = cl.run("organism-checks", "test", model=str(work / "organism"), progress=False)
print("\n".join(checks_text(checks)))

# %% [markdown]
# One read-out by hand: the zeroed head's ablation. Its bound is exact (1e-6 nats); a tool that moved the
# answer here would be reading something that is not in the model.

# %%
dead = [c for c in checks.checks if "zeroed" in c["name"] or "dead" in c["name"]]
for c in dead:
    print(c["name"], c["value"], c["holds"], c["bound"], "passed" if c["passed"] else "FAILED")
