"""countlens: how a transformer represents a count, and what that costs in parameter norm.

Subpackages: ``countlens.toy`` (one attention layer counting, exactly), ``countlens.llm`` (capture the
residual stream of a chat model at the assistant boundary), ``countlens.probes`` (ridge probes) and
``countlens.analysis`` (geometry, figures, the report).
"""

__version__ = "0.1.0"
